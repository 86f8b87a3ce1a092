"""
Live tests: real pi, bwrap, twistd, subprocesses and sockets.
"""
