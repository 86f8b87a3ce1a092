"""
Unit tests: no process, no socket, no real sleep; they run in seconds.
"""
