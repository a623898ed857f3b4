"""Headless runs never hang: the kernel client finds a reply whose arrival signal was consumed by a
send on the same socket (the cause of papermill's hangs at widget cells), a notebook full of Output
widgets runs through with no per-cell limit, a cell past the limit fails naming the cell, and
papermill's command line finds the course's engine."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

from autograder import headless

HANG_CEILING = 600  # seconds: only a hang gets near it
WAIT = 20  # seconds for a reply that is in the socket: a woken poll answers within one


async def _reply_after_sends(kernel_context, client_context, sends: int = 80) -> str:
    """A client waits on its shell socket for a reply while it keeps sending on that socket (as
    nbclient's Output widget mimic does); the reply arrives in the middle of the sends. With
    jupyter_client's own channel the waiting poll is never woken in about 1 run of 4, though the
    reply sits in the socket: each send goes through a synchronous shadow of the asyncio socket
    and can consume libzmq's edge-triggered "readable" signal."""
    session = Session(key=b"")
    kernel = kernel_context.socket(zmq.ROUTER)
    kernel.setsockopt(zmq.RCVHWM, 0)  # it never reads the burst: no limit, so no pipe fills up
    port = kernel.bind_to_random_port("tcp://127.0.0.1")
    client = client_context.socket(zmq.DEALER)
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        channel = headless.WakefulChannel(client, session, asyncio.get_running_loop())
        channel.send(session.msg("execute_request"))
        ident, _ = session.recv(kernel, mode=0)
        waiting = asyncio.ensure_future(channel.get_msg(timeout=None))
        await asyncio.sleep(0.05)
        for i in range(sends):
            if i == sends // 2:
                session.send(kernel, "execute_reply", ident=ident)
            channel.send(session.msg("comm_msg"))
            await asyncio.sleep(0)
        reply = await asyncio.wait_for(waiting, WAIT)  # a ceiling: a woken poll answers within a second
        # The kernel takes in the whole burst before either socket closes: libzmq aborts the process
        # (an assertion in session_base.cpp) when a socket closes with a multipart message half sent.
        for _ in range(sends):
            assert kernel.poll(WAIT * 1000), "a comm_msg of the burst never reached the kernel"
            kernel.recv_multipart()
        return reply["msg_type"]
    finally:
        client.close(0)
        kernel.close(0)
        await asyncio.sleep(0.01)  # the loop lets go of the closed socket before its context ends


def test_the_channel_finds_a_reply_whose_signal_a_send_consumed():
    kernel_context, client_context = zmq.Context(), zmq.asyncio.Context()
    try:
        replies = [asyncio.run(_reply_after_sends(kernel_context, client_context)) for _ in range(20)]
    finally:
        client_context.term()
        kernel_context.term()
    assert replies == ["execute_reply"] * 20


def _notebook(path, sources: list[str]):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    notebook.metadata["kernelspec"] = {"name": "course", "display_name": "Python 3 (course)", "language": "python"}
    nbformat.write(notebook, path)
    return path


def test_a_notebook_of_output_widgets_runs_through_without_a_cell_limit(tmp_path, kernel):
    """60 cells that display into an Output widget: 5 of 6 such runs hung with papermill's own client."""
    cells = ["import ipywidgets as widgets\nfrom IPython.display import display"] + [
        f"out = widgets.Output()\nwith out:\n    display('shown {i}')\ndisplay(out)" for i in range(60)
    ]
    source = _notebook(tmp_path / "outputs.ipynb", cells)
    script = textwrap.dedent(f"""
        from autograder import headless
        done = headless.execute({str(source)!r}, {str(tmp_path / "out.ipynb")!r}, timeout=10**7, cwd={str(tmp_path)!r})
        print(sum(1 for cell in done["cells"] if cell.get("execution_count")))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_CEILING)
    assert run.returncode == 0 and run.stdout.split()[-1] == "61", run.stderr[-2000:]


def test_a_cell_past_the_limit_fails_naming_the_cell(tmp_path, kernel):
    source = _notebook(tmp_path / "slow.ipynb", ["x = 1", "import time\ntime.sleep(600)  # the slow one", "x = 2"])
    with pytest.raises(headless.CellTimeout, match=r"slow.ipynb: cell 1 \(import time\) ran past the 3 s limit"):
        headless.execute(source, tmp_path / "out.ipynb", timeout=3, cwd=tmp_path)


def test_papermill_finds_the_course_engine_by_its_name():
    """``papermill --engine course`` (the maintainers' guide's command) works without importing the course first."""
    code = "from papermill.engines import papermill_engines as e; print(e.get_engine('course').__module__)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "autograder.headless"
