"""Sandtop guests as drivers for the ``anthropic`` SDK's toolsets.

    session = sandtop.Session.start()
    computer = sandtop.anthropic.Computer(session, confirm=ask_person)
    runner = client.beta.messages.tool_runner(model=..., max_tokens=..., messages=[...], tools=[computer])

``Computer``/``AsyncComputer`` subclass ``anthropic.tools.computer``'s
``BetaAbstractComputerToolset20260801`` and its async twin
(``computer_toolset_20260801``); ``Browser``/``AsyncBrowser`` subclass
``anthropic.tools.browser``'s ``BetaAbstractBrowserToolset20260801`` and its
async twin (``browser_toolset_20260801``). Needs ``pip install
'sandtop[anthropic]'``.
"""

from ._browser import AsyncBrowser, Browser, normalize_url, origin_policy, render_read
from ._computer import AsyncComputer, Computer, chords

__all__ = ["AsyncBrowser", "AsyncComputer", "Browser", "Computer", "chords", "normalize_url", "origin_policy", "render_read"]
