"""How a sandbox's process confines itself before any learner's code runs (Linux): Landlock's
allowlist, a user of its own (when the grader is root), user and pid namespaces of its own, and no
capabilities or way to gain them. The grader decides what applies (``modes.policy``); this module
only carries it out, in the sandbox's own process: a warm sandbox's child (``serve.py``), or a new
interpreter (``inside.main``).

Landlock (Linux 5.13 and later, no privilege needed) is reached by its three system calls, whose
numbers are the same on every architecture. Each ABI version adds rights; what this kernel's ABI
lacks is left out, and ``modes.describe`` says what that leaves uncontained: ABI 2 renames and
links across folders, 3 truncation, 4 TCP, 5 device ioctls, 6 signals and abstract Unix sockets
to processes outside the sandbox. No ABI yet covers UDP or connecting to a named Unix socket (a
desktop session's D-Bus would start programs outside the sandbox): a seccomp filter refuses every
new socket instead (:func:`no_sockets`; x86-64 and ARM64, whose system call numbers it names).

This file is copied into the sandbox and must import only the standard library. Not handled:
systems other than Linux (``modes`` never asks for it there).
"""

from __future__ import annotations

import ctypes
import os

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
FS_RIGHTS = (  # in bit order; the ABI that added each one
    ("execute", 1),
    ("write_file", 1),
    ("read_file", 1),
    ("read_dir", 1),
    ("remove_dir", 1),
    ("remove_file", 1),
    ("make_char", 1),
    ("make_dir", 1),
    ("make_reg", 1),
    ("make_sock", 1),
    ("make_fifo", 1),
    ("make_block", 1),
    ("make_sym", 1),
    ("refer", 2),
    ("truncate", 3),
    ("ioctl_dev", 5),
)
FS = {name: 1 << bit for bit, (name, _) in enumerate(FS_RIGHTS)}
READ = FS["execute"] | FS["read_file"] | FS["read_dir"]
ON_FILES = FS["execute"] | FS["write_file"] | FS["read_file"] | FS["truncate"] | FS["ioctl_dev"]
NET_TCP = 0b11  # bind and connect (ABI 4)
SCOPES = 0b11  # abstract Unix sockets and signals (ABI 6)
NET_ABI, SCOPE_ABI = 4, 6
CLONE_NEWUSER, CLONE_NEWPID = 0x10000000, 0x20000000
PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 4, 22, 38
CAPABILITY_VERSION_3 = 0x20080522
SECCOMP_MODE_FILTER, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 2, 0x7FFF0000, 0x00050000
IO_URING_SETUP = 425  # the same on every architecture: io_uring opens sockets without socket()
# audit architecture -> its socket() system call, and the first number of another ABI on it (x32)
SOCKET_CALLS = {"x86_64": (0xC000003E, 41, 0x40000000), "aarch64": (0xC00000B7, 198, 1 << 31)}


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


class RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def _call(name: str, *args) -> None:
    """A libc call that fails loudly (OSError with the errno)."""
    if getattr(_libc, name)(*args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{name}: {os.strerror(error)}")


def landlock_abi() -> int:
    """This kernel's Landlock ABI version; 0 where it has none or it is not enabled."""
    try:
        return _syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except OSError:
        return 0


def fs_rights(abi: int) -> int:
    """Every file system right that Landlock ABI ``abi`` knows."""
    return sum(FS[name] for name, added in FS_RIGHTS if added <= abi)


def landlock(read: list[str], write: list[str], abi: int) -> None:
    """Allow from now on, for this process and every process it starts: reading and executing
    beneath each path of ``read``, everything beneath each of ``write``, nothing else of the file
    system; with ABI 4, no TCP bind or connect; with ABI 6, no signal and no abstract Unix socket
    to a process outside. Paths that do not exist are left out. Raises OSError where it fails."""
    handled = fs_rights(abi)
    attr = RulesetAttr(handled, NET_TCP if abi >= NET_ABI else 0, SCOPES if abi >= SCOPE_ABI else 0)
    ruleset = _syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        for paths, allowed in ((read, READ), (write, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rights = allowed & handled if os.path.isdir(path) else allowed & handled & ON_FILES
                    rule = PathBeneath(rights, fd)
                    _syscall(ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule), 0)
                finally:
                    os.close(fd)
        no_new_privileges()
        _syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def prctl(option: int, value: int) -> None:
    _call("prctl", option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def no_new_privileges() -> None:
    """No program this process starts can gain a privilege (set-user-id files, file capabilities)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def keep_capabilities(kept: tuple[int, ...] = ()) -> None:
    """Only the capabilities ``kept`` (numbers) left, effective and permitted; none with the default."""
    mask = sum(1 << c for c in kept)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(mask, mask, 0, 0, 0, 0)  # effective, permitted, inheritable, for 64 capabilities
    _call("capset", header, data)


def no_capabilities() -> None:
    """No effective, permitted, inheritable or ambient capability left, and none to be gained."""
    keep_capabilities()
    no_new_privileges()


def become(uid: int) -> None:
    """A user and group of the sandbox's own, with no supplementary groups (the grader is root):
    every capability goes with the change. The process stays readable by itself (``/proc/self``)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_DUMPABLE, 1)


def own_namespaces() -> bool:
    """A user namespace of this process's own (so that a process limit counts its processes
    alone) and a pid namespace (so that no signal it sends reaches a process outside: its next
    child is that namespace's first process). False, and nothing changed, where the kernel or a
    security module refuses them (Ubuntu 24.04's AppArmor, a container's seccomp profile)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        _call("unshare", CLONE_NEWUSER | CLONE_NEWPID)
    except OSError:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    return True


def sockets_can_be_refused() -> bool:
    """Whether :func:`no_sockets` knows this machine's system call numbers."""
    return os.uname().machine in SOCKET_CALLS


def no_sockets() -> None:
    """From now on, for this process and every process it starts, ``socket()`` and io_uring fail
    with EACCES (a pipe, or a socket pair, still works), and so does every system call of another
    ABI than the machine's own (32-bit calls on a 64-bit kernel). Raises OSError where it fails."""
    arch, socket_call, other_abi = SOCKET_CALLS[os.uname().machine]
    load_arch, load_number, jeq, jge, ret = 0x20, 0x20, 0x15, 0x35, 0x06
    refuse = SECCOMP_RET_ERRNO | 13  # EACCES, as Landlock refuses
    program = [
        (load_arch, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, refuse),
        (load_number, 0, 0, 0),  # seccomp_data.nr
        (jge, 3, 0, other_abi),
        (jeq, 2, 0, socket_call),
        (jeq, 1, 0, IO_URING_SETUP),
        (ret, 0, 0, SECCOMP_RET_ALLOW),
        (ret, 0, 0, refuse),
    ]
    filters = (SockFilter * len(program))(*(SockFilter(*line) for line in program))
    no_new_privileges()
    fprog = SockFprog(len(program), filters)
    _call("prctl", PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0)


def confine(policy: dict) -> None:
    """Carry out ``policy`` (``modes.policy``) in this process, in order: a user of its own, no
    capabilities, the process limit (once the process counts against its own), Landlock, no
    sockets."""
    if policy.get("uid") is not None:
        become(policy["uid"])
    no_capabilities()
    if policy.get("processes"):
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (policy["processes"],) * 2)
    if policy.get("landlock"):
        landlock(policy["read"], policy["write"], policy["landlock"])
    if policy.get("sockets") is False:
        no_sockets()
