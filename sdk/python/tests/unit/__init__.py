"""Unit tests of the kube-sandbox SDK: no cluster needed.

Run them from the repository root with
``/usr/bin/python3 -m unittest discover -s sdk/python/tests/unit -t sdk/python``.
"""
