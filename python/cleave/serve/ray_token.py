"""Ray's token authentication, as a client of an existing cluster needs it.

Since Ray 2.59, once a token exists at ~/.ray/auth_token (or RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH
names one), ``ray start`` on that machine turns authentication on by itself, but a client given
an explicit address sends the token only when RAY_AUTH_MODE=token. Turning token mode on
unasked would break a cluster without authentication (its workers could not reach the driver's
own servers), so the cluster is asked first: one unauthenticated call to its GCS, which answers
in milliseconds, says whether it wants a token."""

import contextlib
import os
import sys


def _ray_private():
    """Ray's private pieces this module needs, or None where this Ray lacks them (before 2.59,
    or renamed later): then nothing is probed, as before token authentication existed."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config, GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:
        return None
    return GcsClient, AuthenticationError, AuthenticationTokenLoader, Config


def token_probe_available():
    return _ray_private() is not None


def cluster_wants_token(address, ray_private=None):
    """True when the GCS at ``address`` (HOST:PORT) refuses a call without a token; False when it
    answers, or when it cannot be asked."""
    parts = ray_private or _ray_private()
    if parts is None:
        return False
    gcs_client, authentication_error = parts[0], parts[1]
    try:
        with _stderr_silenced():
            gcs_client(address=address).internal_kv_get(b"cleave-probe", None, timeout=5)
    except authentication_error:
        return True
    except Exception:
        # Unreachable, or some other trouble: ray.init says what it is.
        return False
    return False


@contextlib.contextmanager
def _stderr_silenced():
    """Ray's C++ client logs a refused call as a warning on fd 2 before ``ray.init`` has set
    its log level; the answer is what this module reports, in its own words."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def token_available(ray_private=None):
    parts = ray_private or _ray_private()
    if parts is None:
        return False
    try:
        return bool(parts[2].instance().has_token(ignore_auth_mode=True))
    except Exception:
        return False


def send_token_if_asked(address, environ=None, ray_private=None):
    """Before ``ray.init(address)``: where RAY_AUTH_MODE is unset and the cluster wants a token,
    turns token mode on for this process (and what it starts) when a token is at hand. Returns
    a note for the user, an error (no token at hand) prefixed ``error:``, or None (nothing
    to do)."""
    environ = os.environ if environ is None else environ
    if not address or environ.get("RAY_AUTH_MODE") is not None:
        return None
    parts = ray_private or _ray_private()
    if parts is None or not cluster_wants_token(address, parts):
        return None
    if not token_available(parts):
        return (
            f"error: the Ray cluster at {address} asks for a token (Ray's token authentication) and none is at "
            "hand: put the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN (`ray get-auth-token` on the "
            "head prints it)"
        )
    environ["RAY_AUTH_MODE"] = "token"
    # Ray reads the mode into its cached config once; read it again, as `ray start` does.
    parts[3].initialize("")
    return f"note: the Ray cluster at {address} asks for a token; sending the one Ray's client finds"
