"""`vrsflow serve` only on a Prefect API that strangers cannot use.

A served deployment runs `dvc exp run` as the serving user whenever someone starts a run through
the Prefect API, and a self-hosted Prefect server has no authentication unless it is configured.
Serving is therefore refused on a non-loopback API unless the client has credentials (Prefect's
`api.auth_string` for a self-hosted server with `server.api.auth_string`, or `api.key` for Prefect
Cloud) and the server turns away a request that has none.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import httpx


class ServeRefused(RuntimeError):
    """Serving would expose the pipeline; the message is one line saying what to set."""


HOW = ("set the same secret on the server (PREFECT_SERVER_API_AUTH_STRING=user:password) and the client "
       "(PREFECT_API_AUTH_STRING), from the environment or a secret store, never a committed file")


def is_loopback(url: str) -> bool:
    """Whether the API URL's host is this machine only (localhost, 127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def accepts_anonymous(api_url: str, timeout: float = 10.0) -> bool:
    """Whether the Prefect API answers a request that carries no credentials.

    Raises:
        ServeRefused: the API cannot be reached or answers neither 2xx nor 401/403.
    """
    url = f"{api_url.rstrip('/')}/admin/version"  # not a health path: the auth middleware guards it
    try:
        response = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as err:
        raise ServeRefused(f"cannot reach the Prefect API at {api_url}: {type(err).__name__}") from err
    if response.status_code in (401, 403):
        return False
    if response.is_success:
        return True
    raise ServeRefused(f"the Prefect API at {api_url} answered {response.status_code} to {url}")


def check_api(api_url: str | None, auth_string: str | None, api_key: str | None) -> None:
    """Refuse to serve on an API others can reach without credentials.

    Args:
        api_url: PREFECT_API_URL ("" or None: none set, refused).
        auth_string: the client's basic-auth string (`api.auth_string`), if any.
        api_key: the client's Prefect Cloud key (`api.key`), if any.

    Raises:
        ServeRefused: no API, a non-loopback API without client credentials, or one that accepts
            anonymous requests.
    """
    if not api_url:  # Prefect would serve on a temporary API of this process: no UI, runs started by nobody
        raise ServeRefused("no Prefect API to serve on: start `prefect server start` and set PREFECT_API_URL "
                           "(e.g. http://127.0.0.1:4200/api)")
    if is_loopback(api_url):
        return
    if not (auth_string or api_key):
        raise ServeRefused(f"refusing to serve on {api_url} (not loopback) without Prefect basic auth: {HOW}")
    if accepts_anonymous(api_url):
        raise ServeRefused(f"refusing to serve: the Prefect API at {api_url} accepts requests without "
                           f"credentials; {HOW}")


def check_current_api() -> None:
    """`check_api` with the active Prefect settings."""
    from prefect.settings import get_current_settings

    api = get_current_settings().api
    secret = api.auth_string.get_secret_value() if api.auth_string is not None else None
    key = api.key.get_secret_value() if api.key is not None else None
    check_api(api.url, secret, key)
