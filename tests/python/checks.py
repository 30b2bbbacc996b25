"""The checks of mnemo's SDK scripts (openai_sdk.py, mcp_client.py).

Explicit, not `assert`: `python -O` (or PYTHONOPTIMIZE in the environment) removes every
`assert`, and a script whose checks were removed would pass having checked nothing. A failed
check raises CheckFailed, so the script exits non-zero with the message; the Rust test that
runs a script also requires its last line, which it prints only after every check.
"""


class CheckFailed(Exception):
    """A check of mnemo's behaviour failed."""


def check(condition, message) -> None:
    """Fails with `message` (any value; shown as text) unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


def fail(message) -> None:
    """Fails with `message`: for what must not happen (an accepted bad call)."""
    raise CheckFailed(message)
