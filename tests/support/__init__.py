"""
Helpers shared by the unit and the live tests (no tests here).
"""
