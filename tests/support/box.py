"""
The box in tests: C{BWRAP}, where bubblewrap is installed, and C{INSIDE},
the shell probe a real box runs (C{tests.live.test_box_live}): one
C{NAME=value} line for each thing it tried (writing, listing, the
capabilities, the pids and environment it sees, a TCP and a Unix socket
of the host's).
"""

from __future__ import annotations


BWRAP = "/usr/bin/bwrap"


INSIDE = r"""
say() { printf '%s=%s\n' "$1" "$2"; }
say PWD "$(pwd)"
echo inside > ws.txt && say WS_WRITE ok || say WS_WRITE fail
echo pi > "$PIDIR/pi.txt" && say PI_WRITE ok || say PI_WRITE fail
echo t > "/tmp/$MARK" && say TMP_WRITE ok || say TMP_WRITE fail
touch "$DATA/intruder.txt" 2>/dev/null && say DATA_WRITE ok || say DATA_WRITE fail
touch "/etc/$MARK" 2>/dev/null && say ETC_WRITE ok || say ETC_WRITE fail
say DATA_LIST "$(ls -A "$DATA" | tr '\n' ' ')"
say WORKSPACES_LIST "$(ls -A "$DATA/workspaces" | tr '\n' ' ')"
say HOME_LIST "$(ls -A "$FAKEHOME" | tr '\n' ' ')"
test -e "$DATA/secret.txt" && say SECRET seen || say SECRET hidden
say RUNTIME "$(cat "$FAKEHOME/runtime/tool.txt")"
touch "$FAKEHOME/runtime/new" 2>/dev/null \
  && say RUNTIME_WRITE ok || say RUNTIME_WRITE fail
say CAPEFF "$(awk '/^CapEff/ {print $2}' /proc/self/status)"
say NONEWPRIVS "$(awk '/^NoNewPrivs/ {print $2}' /proc/self/status)"
say PIDS "$(ls /proc | grep -c '^[0-9]')"
say HOSTPID "$(test -e /proc/$HOSTPID && echo visible || echo invisible)"
say INIT_ENV "$(tr '\0' ' ' < /proc/1/environ)"
say ENV_NAMES "$(env | cut -d= -f1 | sort | tr '\n' ' ')"
unshare -U true 2>/dev/null && say USERNS ok || say USERNS fail
"$PY" -c '
import os, socket
try:
    s = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=3)
    print("TCP=connected", s.recv(10).decode())
except OSError as e:
    print("TCP=refused")
try:
    u = socket.socket(socket.AF_UNIX)
    u.settimeout(3)
    u.connect(os.environ["SOCK"])
    print("UNIX=" + u.recv(10).decode())
except OSError as e:
    print("UNIX=failed " + str(e))
'
"""
