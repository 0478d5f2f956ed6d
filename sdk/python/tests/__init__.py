"""Tests of the kube-sandbox Python SDK: unit (no cluster) and e2e (a real cluster)."""
