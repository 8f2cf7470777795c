"""The web console at `/ui`: static files from the package (`sluice.rest.ui`), no CDN.

The console is a client of the same REST API (it sends the browser's credentials, so
`rest.auth=basic` asks the user to log in once; with `rest.auth=token` it shows a login form and
sends the token as a bearer, and these files answer without one: see `_auth.is_console_file`);
it has no route of its own beyond its files.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

from sluice.rest._routes import GuardedRoute

router = APIRouter(include_in_schema=False, route_class=GuardedRoute)

_UI = files("sluice.rest.ui")
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


@router.get("/ui")
def console_root() -> RedirectResponse:
    return RedirectResponse("/ui/")


@router.get("/ui/")
def console_index() -> FileResponse:
    return FileResponse(str(_UI / "index.html"), media_type="text/html")


@router.get("/ui/static/{name}")
def console_file(name: str) -> FileResponse:
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or suffix not in _TYPES or not (_UI / name).is_file():
        raise HTTPException(404, f"no console file {name!r}")
    return FileResponse(str(_UI / name), media_type=_TYPES[suffix])
