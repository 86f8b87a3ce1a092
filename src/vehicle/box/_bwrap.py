# -*- test-case-name: tests.unit.test_box -*-
"""
The bubblewrap argv of an agent body's box, built by one pure function.

The box sees the host's root read-only, its own workspace and pi folder
writable at the same absolute paths (or where the spec says it sees them),
a private C{/tmp}, and an empty read-only tmpfs where the home folder, the
data dir and the gardend profile would be.
"""

from __future__ import annotations

from pathlib import Path

from vehicle.box._spec import BoxSpec, checkSpec


#: Namespaces and privileges, in the order reliability.md section 1 gives.
#: C{--unshare-user} is explicit because bwrap skips it for uid 0, and
#: C{--disable-userns} (bwrap 0.8) needs it.
NAMESPACE_FLAGS: tuple[str, ...] = (
    "--new-session",
    "--die-with-parent",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop",
    "ALL",
)

_TMP = Path("/tmp")


def _depth(path: Path) -> int:
    return len(path.parts)


def bwrapArgv(spec: BoxSpec) -> list[str]:
    """
    Build the full argv (bwrap first) that runs C{spec.command} in its box.

    Mounts are ordered so that a mount beneath another always comes after it:
    the tmpfs over the data dir first, then the binds that re-expose the
    workspace and the pi folder inside it, and only then, once nothing more
    needs to be created inside them, the hidden tmpfs are remounted
    read-only (C{--remount-ro} before a bind beneath it fails with EROFS).
    Spawn the result with a minimal environment of its own (bwrap's init is
    pid 1 inside and its C{/proc/1/environ} is readable there) and with no
    file descriptors but the ones the body needs.

    @param spec: a spec whose paths are canonical (see
        L{vehicle.box.canonicalSpec}).
    @return: the argv; C{argv[0]} is C{spec.bwrap}.
    @raise vehicle.box.BoxSpecError: when C{spec} fails L{checkSpec}.
    """
    checkSpec(spec)
    argv = [spec.bwrap, *NAMESPACE_FLAGS, "--clearenv"]
    for name, value in spec.env:
        argv += ["--setenv", name, value]
    if spec.system is None:
        argv += ["--ro-bind", "/", "/"]
    else:
        for path, target in spec.system:
            if target is None:
                argv += ["--ro-bind", str(path), str(path)]
            else:
                argv += ["--symlink", target, str(path)]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += _mounts(spec)
    if spec.seccompFd is not None:
        argv += ["--seccomp", str(spec.seccompFd)]
    argv += ["--chdir", str(spec.workspaceInside), "--", *spec.command]
    return argv


def _mounts(spec: BoxSpec) -> list[str]:
    """
    The box's own mounts, each beneath another after it: the hidden
    folders' tmpfs, the private C{/tmp}, the read-only paths, the body's
    folders and the socket's; then the hidden folders (and, on a minimal
    root, bwrap's own root) made read-only.
    """
    # The private /tmp already hides the host's; masking it again and making
    # that read-only would take the body's /tmp away.
    masked = [hidden for hidden in spec.hidden if hidden != _TMP]
    mounts: list[tuple[Path, list[str]]] = []
    for hidden in masked:
        mounts.append((hidden, ["--tmpfs", str(hidden)]))
    mounts.append((_TMP, ["--size", str(spec.tmpSizeBytes), "--tmpfs", str(_TMP)]))
    for path in spec.readOnly:
        mounts.append((path, ["--ro-bind", str(path), str(path)]))
    for path, inside in ((spec.workspace, spec.workspaceInside), (spec.piDir, spec.piDirInside)):
        mounts.append((inside, ["--bind", str(path), str(inside)]))
    if spec.socketDir is not None:
        socketDir = str(spec.socketDir)
        mounts.append((spec.socketDir, ["--ro-bind", socketDir, socketDir]))
    argv: list[str] = []
    # A stable sort by depth puts every mount after the ones above it; among
    # equals the order above stands, so the argv is deterministic.
    for _, args in sorted(mounts, key=lambda mount: _depth(mount[0])):
        argv += args
    for hidden in masked:
        argv += ["--remount-ro", str(hidden)]
    if spec.system is not None:
        # bwrap's own root is a tmpfs holding the mount points: read-only too,
        # so nothing outside the body's folders and /tmp takes a write.
        argv += ["--remount-ro", "/"]
    return argv
