"""Run notebooks headless (papermill) with a per-cell time limit and a kernel client that cannot
miss a reply: what the tests, ``make bench`` and ``make gpu-check`` use, and, as the papermill
engine ``course``, what the maintainers' guide's command uses.

Why: papermill runs of chapter 2 hung for good at a widget cell, the kernel idle, papermill
waiting. The cause, reproduced with a notebook of 30 cells that each display into an
``ipywidgets.Output`` (5 of 6 runs hung; 0 of 6 once the client stopped sending): nbclient imitates
a front end's Output widget by sending ``comm_msg`` updates on the shell socket while another task
waits on that socket for the cell's ``execute_reply`` with no timeout. jupyter_client sends through
a synchronous shadow of the asyncio socket, and that send consumes libzmq's edge-triggered
"readable" signal; the reply then sits in the socket and the waiting poll is never woken (nbclient
issue #312). Two fixes, at two depths: the course's widgets no longer use Output widgets
(``course/plots/_widgets.py``), so nothing sends mid-cell; and the client here never waits on a
socket for more than :data:`POLL_SECONDS` at a time, so a missed signal costs at most that. Every
run also has a per-cell limit, :data:`CELL_TIMEOUT`, so any other hang fails with the cell named.

Not handled: kernels other than the course's Python kernel were not tried.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from queue import Empty

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

POLL_SECONDS = 1.0  # the longest one wait on a socket lasts before the socket is looked at again
CELL_TIMEOUT = 600  # seconds a cell may run headless; a ceiling for a hang, far above any chapter's cell
ENGINE = "course"  # papermill --engine course


class WakefulChannel(AsyncZMQSocketChannel):
    """A channel whose ``get_msg`` polls in slices of :data:`POLL_SECONDS`, so a message whose
    arrival signal was consumed elsewhere is found at the next slice instead of never."""

    async def get_msg(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))
            try:
                return await super().get_msg(timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise


class KernelClient(AsyncKernelClient):
    shell_channel_class = Type(WakefulChannel)
    iopub_channel_class = Type(WakefulChannel)
    stdin_channel_class = Type(WakefulChannel)
    control_channel_class = Type(WakefulChannel)


class KernelManager(AsyncKernelManager):
    # AsyncKernelManager redeclares client_factory with a fixed default, so client_class alone is ignored
    client_class = DottedObjectName("autograder.headless.KernelClient")
    client_factory = Type(default_value=KernelClient, klass=AsyncKernelClient)


class Engine:
    """papermill's engine ``course``: its nbclient engine with :class:`KernelManager` and a default
    per-cell limit of :data:`CELL_TIMEOUT`; ``env`` (a dict), when given, is the kernel's environment.

    papermill loads its engines while it imports itself, so this class imports papermill only when
    it runs, and hands the work to :func:`_nbclient_engine`.
    """

    @classmethod
    def execute_notebook(cls, nb, kernel_name, **kwargs):
        return _nbclient_engine().execute_notebook(nb, kernel_name, **kwargs)

    @classmethod
    def nb_kernel_name(cls, nb, name=None):
        return _nbclient_engine().nb_kernel_name(nb, name)

    @classmethod
    def nb_language(cls, nb, language=None):
        return _nbclient_engine().nb_language(nb, language)


@functools.cache
def _nbclient_engine():
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine
    from papermill.utils import merge_kwargs, remove_args

    class CourseEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, execution_timeout=None, env=None, **kwargs):
            start_timeout = kwargs.pop("start_timeout", 60)
            kwargs = remove_args(["input_path", "timeout", "startup_timeout"], **kwargs)
            options = merge_kwargs(
                kwargs,
                timeout=execution_timeout or CELL_TIMEOUT,
                startup_timeout=start_timeout,
                kernel_name=kernel_name,
                kernel_manager_class=KernelManager,
            )
            client = PapermillNotebookClient(nb_man, **options)
            return client.execute(**({"env": env} if env is not None else {}))

    return CourseEngine


class CellTimeout(RuntimeError):
    """A cell ran past the per-cell limit."""


def execute(
    notebook: Path,
    output: Path,
    kernel: str = "course",
    cwd: Path | None = None,
    timeout: float = CELL_TIMEOUT,
    parameters: dict | None = None,
    env: dict | None = None,
) -> dict:
    """Run ``notebook`` into ``output`` and return the executed notebook as a dict.

    A cell that raises stops the run (its error is in the returned notebook; papermill's error is
    swallowed, the caller decides which errors were allowed). A cell that runs past ``timeout``
    seconds raises :class:`CellTimeout` naming the cell.
    """
    import papermill
    from nbclient.exceptions import CellTimeoutError
    from papermill.engines import papermill_engines
    from papermill.exceptions import PapermillExecutionError

    papermill_engines.register(ENGINE, Engine)  # also where the package's entry point is not installed
    started: list[tuple[int, str]] = []  # (index, first line) of each cell as it starts
    try:
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters=parameters or {},
            kernel_name=kernel,
            cwd=None if cwd is None else str(cwd),
            engine_name=ENGINE,
            execution_timeout=timeout,
            progress_bar=False,
            env=env,
            on_cell_start=lambda cell, cell_index: started.append((cell_index, cell.source.strip().split("\n")[0])),
        )
    except PapermillExecutionError:
        pass
    except CellTimeoutError as error:
        where = f"cell {started[-1][0]} ({started[-1][1]})" if started else "a cell"
        raise CellTimeout(
            f"{Path(notebook).name}: {where} ran past the {timeout:g} s limit per cell: a hang, or a machine "
            "far slower than expected (raise the limit with --execution-timeout)"
        ) from error
    return json.loads(Path(output).read_text())
