"""Every way a ``sluice`` command can fail, each with its exit code.

::

    CliError                  exit 1   root: printed as one ``error: …`` line on stderr
    ├── ServerError           exit 1   the worker answered with an HTTP error (4xx/5xx)
    ├── BadResponse           exit 1   the worker answered, but not with what the API promises
    ├── UsageProblem          exit 2   bad input the parser could not catch (a malformed file)
    └── WorkerUnreachable     exit 3   no answer: connection refused, DNS, timeout

Exit code 2 is also what the command-line parser's own usage errors give, so a script can tell
"I called it wrong" (2) from "the worker refused" (1) from "there is no worker" (3).
"""

from __future__ import annotations

import httpx

__all__ = [
    "EXIT_SERVER",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "BadResponse",
    "CliError",
    "ServerError",
    "UsageProblem",
    "WorkerUnreachable",
    "auth_hint",
    "one_line",
]

EXIT_SERVER = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def one_line(text: str) -> str:
    """Fold a possibly multi-line message into one line (stderr errors are always one line)."""
    parts = [line.strip() for line in str(text).splitlines()]
    return "; ".join(p for p in parts if p) or "(no message)"


class CliError(Exception):
    """A failure reported to the user as ``error: <message>`` and exit code ``exit_code``."""

    exit_code: int = EXIT_SERVER

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))

    @property
    def message(self) -> str:
        """The one-line message, without the ``error:`` prefix."""
        return str(self.args[0])


class ServerError(CliError):
    """The worker answered with an HTTP error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str, *, error_code: object = None) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.error_code = error_code

    @classmethod
    def from_response(cls, response: httpx.Response, *, credentials: bool = False) -> ServerError:
        """Build the error from a 4xx/5xx response of either API face.

        ``/v1`` errors carry ``{"error_code", "message"}``, the RocketMQ Connect face
        ``{"errorCode", "message"}``; anything else (a proxy's HTML page, an empty body) falls back
        to the first line of the body or the reason phrase, so the user still sees one line.
        A 401 also says how to authenticate (``credentials``: whether the request carried any).
        """
        message: str | None = None
        error_code: object = None
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            if isinstance(body.get("message"), str) and body["message"].strip():
                message = body["message"]
                hint = body.get("suggestion")  # what to do, when the worker knows
                if isinstance(hint, str) and hint and hint not in message:
                    message = f"{message} ({hint})"
            # FastAPI's own validation errors use {"detail": …}; keep them readable too.
            elif "detail" in body:
                message = str(body["detail"])
            error_code = body.get("error_code", body.get("errorCode"))
        if message is None:
            text = response.text.strip()
            message = text.splitlines()[0] if text else (response.reason_phrase or "error")
        if response.status_code == 401:
            message = f"{message} ({auth_hint(response, credentials=credentials)})"
        return cls(response.status_code, message, error_code=error_code)


def auth_hint(response: httpx.Response, *, credentials: bool) -> str:
    """How to authenticate, for a 401: the worker's challenge says which scheme it takes
    (`WWW-Authenticate`), the command's own options how to give it (the worker cannot know
    them)."""
    scheme = response.headers.get("www-authenticate", "").split(" ", 1)[0].lower()
    basic = "log in: --user NAME and --password, or SLUICE_USER and SLUICE_PASSWORD"
    token = "give a token: --token or SLUICE_TOKEN"
    how = {"basic": basic, "bearer": token}.get(scheme, f"{basic}; or {token}")
    return f"the credentials given were refused; {how}" if credentials else how


class BadResponse(CliError):
    """The worker answered successfully but the body is not what the REST API promises."""


class UsageProblem(CliError):
    """Input the command line parser accepted but that turned out unusable (bad JSON, …)."""

    exit_code = EXIT_USAGE


class WorkerUnreachable(CliError):
    """Nothing answered at the worker's URL (refused, unknown host, timed out)."""

    exit_code = EXIT_UNREACHABLE

    def __init__(self, url: str, reason: str, *, message: str | None = None) -> None:
        super().__init__(message or f"cannot reach the worker at {url} ({reason})")
        self.url = url
        self.reason = reason
