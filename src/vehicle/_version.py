"""
Provides vehicle version information.
"""

# This file is auto-generated! Do not edit!
# Use `python -m incremental.update vehicle` to change this file.

from incremental import Version


__version__ = Version("vehicle", 0, 1, 0)
__all__ = ["__version__"]
