"""The version of the kube-sandbox SDK."""

__version__ = "0.1.0"
