"""``python -m autograder doctor``: what this machine lets the sandbox do, the mode grading gets,
and the one step that would make it stronger.

Each finding is read from the machine itself (the programs on ``PATH``, the kernel's Landlock ABI,
a bubblewrap sandbox started for a moment, the settings that refuse namespaces), never from the
system's name alone. Not handled: telling a container runtime's seccomp profile from another
reason bubblewrap fails inside a container (both get the container's advice).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from autograder.sandbox import modes, system

APPARMOR_USERNS = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
UBUNTU_BWRAP_PROFILE = "/usr/share/apparmor/extra-profiles/bwrap-userns-restrict"
LSM = Path("/sys/kernel/security/lsm")


def bubblewrap_starts() -> str:
    """Why a bubblewrap sandbox does not start here ('' where it does)."""
    found = shutil.which("bwrap")
    if not found:
        return "bwrap is not installed"
    done = subprocess.run(
        [*modes.bubblewrap(Path(sys.prefix), Path("/")), "--", sys.executable, "-I", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (
        "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)])[-1]
    )


def in_container() -> bool:
    """Whether this process runs in a container (Docker, Podman, a Kubernetes pod)."""
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists() or "KUBERNETES_SERVICE_HOST" in os.environ:
        return True
    try:
        return any(word in Path("/proc/1/cgroup").read_text() for word in ("docker", "kubepods", "containerd"))
    except OSError:
        return False


def stronger_linux(bwrap_problem: str, abi: int) -> list[str]:
    """The steps that would make a Linux machine's sandbox stronger, the most useful first."""
    steps = []
    if bwrap_problem == "bwrap is not installed":
        steps.append(
            "install bubblewrap: `sudo apt install bubblewrap` (Debian, Ubuntu), `sudo dnf install bubblewrap` "
            "(Fedora, RHEL)"
        )
    elif bwrap_problem:
        if APPARMOR_USERNS.exists() and APPARMOR_USERNS.read_text().strip() == "1":
            steps.append(
                "let bubblewrap make namespaces under AppArmor (Ubuntu 24.04; 25.04 and later do it already): "
                f"`sudo ln -s {UBUNTU_BWRAP_PROFILE} /etc/apparmor.d/ && sudo apparmor_parser -r "
                "/etc/apparmor.d/bwrap-userns-restrict`"
            )
        elif in_container():
            steps.append(
                "let the container make user namespaces: `docker run --security-opt seccomp=unconfined "
                "--security-opt apparmor=unconfined ...`, or in Kubernetes the pod's `securityContext: "
                "{seccompProfile: {type: Unconfined}, appArmorProfile: {type: Unconfined}}` (or a seccomp "
                "profile that allows clone, unshare and mount in a new user namespace)"
            )
        elif Path("/proc/sys/user/max_user_namespaces").exists():
            steps.append("allow user namespaces: `sudo sysctl -w user.max_user_namespaces=10000`")
    if not abi and in_container():
        steps.append(
            "let the container use Landlock: Docker 23 or later, whose default seccomp profile allows Landlock's "
            "system calls, or a profile that allows landlock_create_ruleset, landlock_add_rule and "
            "landlock_restrict_self (and a node whose kernel has Landlock: Linux 5.13 or later)"
        )
    elif not abi:
        enabled = LSM.exists() and "landlock" in LSM.read_text()
        steps.append(
            "a kernel with Landlock (Linux 5.13 or later)"
            if not enabled and _kernel() < (5, 13)
            else "enable Landlock: add `lsm=landlock,` before the kernel's other security modules on its command "
            f"line (now: {LSM.read_text().strip() if LSM.exists() else 'unknown'})"
        )
    elif abi < 6 and bwrap_problem and modes.is_root() and not modes.own_user("landlock"):
        steps.append(
            "install Python where every user can read it (not under /root), so that each submission runs as a "
            f"user of its own: without namespaces, Landlock ABI {abi} lets a submission signal every process of root's"
        )
    elif abi < 6:
        steps.append(
            f"Linux 6.12 or later (Landlock ABI 6; this kernel has ABI {abi}), which keeps a submission's signals "
            "and abstract sockets to itself where no namespace can"
        )
    return steps


def _kernel() -> tuple[int, int]:
    try:
        major, minor = platform.release().split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def findings() -> tuple[list[str], list[str]]:
    """What this machine offers, line by line, and the steps that would make the sandbox stronger."""
    lines = [f"system: {platform.system()} {platform.release()} ({platform.machine()}), as {_who()}"]
    steps = []
    if sys.platform.startswith("linux"):
        problem, abi = bubblewrap_starts(), modes.landlock_abi()
        lines.append(f"bubblewrap: {'starts a sandbox here' if not problem else problem} ({shutil.which('bwrap')})")
        lines.append(
            f"Landlock: ABI {abi}" + (" (what it adds: see autograder/sandbox/confine.py)" if abi else " (none)")
        )
        lines.append(f"seccomp filter for sockets: {'yes' if system.REFUSES_SOCKETS else 'no (an unknown machine)'}")
        steps = stronger_linux(problem, abi)
    elif sys.platform == "darwin":
        found = shutil.which("sandbox-exec")
        lines.append(f"sandbox-exec: {found or 'missing'}")
        steps = [] if found else ["grade on Linux, where bubblewrap and Landlock apply"]
    else:
        lines.append(
            "Windows: no sandbox tool; a submission's code can read and write whatever your user can, reach the "
            "network and end your other programs; only the limits (time, output, memory) apply"
        )
        steps = [
            "grade under WSL2 (`wsl --install -d Ubuntu`, then the course's Linux set-up there), where "
            "Landlock and, with `sudo apt install bubblewrap`, bubblewrap apply"
        ]
    return lines, steps


def _who() -> str:
    if not hasattr(os, "geteuid"):
        return "this user"
    return "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"


def main() -> int:
    """Print the findings, the mode grading gets here and the steps; 0 unless no sandbox starts."""
    from autograder.sandbox import launch

    lines, steps = findings()
    for line in lines:
        print(line)
    try:
        mode = launch.isolation()
    except modes.SandboxUnavailable as error:
        print(f"grading: impossible here\n{error}")
        return 2
    print(f"grading runs in: {mode}: {modes.describe(mode)}")
    if mode != modes.candidates()[0]:
        print(f"(the stronger {', '.join(modes.candidates()[: modes.candidates().index(mode)])} did not start)")
    for step in steps:
        print(f"to make it stronger: {step}")
    if not steps:
        print("nothing to add: this is the strongest sandbox the course has")
    return 0
