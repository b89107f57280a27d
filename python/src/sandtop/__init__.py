"""Sandtop guests as drivers for the official OpenAI SDK.

    session = sandtop.Session.start()            # host-cli guest start
    runner = ResponsesToolRunner(computer=ComputerToolset(sandtop.Computer(session)))
    runner.run(client, {"model": ..., "input": ...})

``Computer``/``AsyncComputer`` implement ``openai.lib.computer``'s
``ComputerDriver``/``AsyncComputerDriver``; ``Browser``/``AsyncBrowser``
implement ``openai.lib.browser``'s driver protocol. The package needs only
the standard library; ``pip install 'sandtop[openai]'`` adds the SDK.
"""

from ._channel import (
    MAX_REPLY_BYTES,
    Cancelled,
    ChannelError,
    DaemonClient,
    DaemonError,
    SandtopError,
)
from .browser import AsyncBrowser, Browser, BrowserCallError
from .computer import AsyncComputer, Computer
from .files import GrantError, Grants
from .session import Session, state_dir

__version__ = "0.1.0"

__all__ = [
    "MAX_REPLY_BYTES",
    "AsyncBrowser",
    "AsyncComputer",
    "Browser",
    "BrowserCallError",
    "Cancelled",
    "ChannelError",
    "Computer",
    "DaemonClient",
    "DaemonError",
    "GrantError",
    "Grants",
    "SandtopError",
    "Session",
    "state_dir",
]
