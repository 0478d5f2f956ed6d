"""End-to-end tests of the kube-sandbox SDK against a real cluster (see test_sdk.py)."""
