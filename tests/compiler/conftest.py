"""Compiler tests share tests/support.py with the top-level tests (it lives one directory up)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
