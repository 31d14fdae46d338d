"""TLS for the gRPC ports and the HA port (issue 22), and a local CA for `mqcluster up --tls`.

Servers: a certificate and its key (PEM); with `mutual`, clients must show a certificate
signed by the CA too. Clients verify the server against the CA (`$MQ_TLS_CA` for mqclient,
with `$MQ_TLS_CERT` / `$MQ_TLS_KEY` when servers ask for client certificates).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import ssl
import subprocess
from pathlib import Path

import grpc

CA_ENV = "MQ_TLS_CA"
CERT_ENV = "MQ_TLS_CERT"
KEY_ENV = "MQ_TLS_KEY"
MAX_PEM_BYTES = 1 << 20
OPENSSL_TIMEOUT_S = 30.0
# The names our certificates are for (a local cluster on loopback); gRPC checks the target's
# host against them.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


class TlsError(ValueError):
    """TLS files that cannot be used; the message says which and why."""


def read_pem(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as e:
        raise TlsError(f"{what} {path}: {e.strerror}") from None
    if len(data) > MAX_PEM_BYTES or b"-----BEGIN" not in data:
        raise TlsError(f"{what} {path}: not a PEM file")
    return data


@dataclasses.dataclass(frozen=True)
class ServerTls:
    cert_path: str
    key_path: str
    ca_path: str = ""  # needed for `mutual` (and to verify peers this process dials)
    mutual: bool = False

    def __post_init__(self) -> None:
        if not self.cert_path or not self.key_path:
            raise TlsError("TLS needs a certificate and its key")
        if self.mutual and not self.ca_path:
            raise TlsError("mutual TLS needs the CA that signs client certificates")

    def grpc_credentials(self) -> grpc.ServerCredentials:
        pair = (read_pem(self.key_path, "TLS key"), read_pem(self.cert_path, "TLS certificate"))
        ca = read_pem(self.ca_path, "TLS CA") if self.ca_path else None
        return grpc.ssl_server_credentials([pair], root_certificates=ca if self.mutual else None,
                                           require_client_auth=self.mutual)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(self.cert_path, self.key_path)
            if self.mutual:
                ctx.load_verify_locations(self.ca_path)
                ctx.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"TLS files {self.cert_path}, {self.key_path}: {e}") from None
        return ctx

    def client(self) -> ClientTls:
        """How this process dials its peers (same CA; its certificate when mutual)."""
        return ClientTls(self.ca_path, self.cert_path if self.mutual else "",
                         self.key_path if self.mutual else "")


@dataclasses.dataclass(frozen=True)
class ClientTls:
    ca_path: str
    cert_path: str = ""
    key_path: str = ""

    @classmethod
    def from_env(cls, ca_path: str | None = None,
                 env: dict[str, str] | None = None) -> ClientTls | None:
        env = dict(os.environ) if env is None else env
        ca = ca_path or env.get(CA_ENV, "")
        if not ca:
            return None
        return cls(ca, env.get(CERT_ENV, ""), env.get(KEY_ENV, ""))

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        cert = read_pem(self.cert_path, "TLS certificate") if self.cert_path else None
        key = read_pem(self.key_path, "TLS key") if self.key_path else None
        ca = read_pem(self.ca_path, "TLS CA") if self.ca_path else None  # None: system CAs
        return grpc.ssl_channel_credentials(ca, key, cert)

    def ssl_context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cafile=self.ca_path or None)
            if self.cert_path:
                ctx.load_cert_chain(self.cert_path, self.key_path)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"TLS CA {self.ca_path}: {e}") from None
        return ctx


def plaintext_hint(code: str, details: str, tls: ClientTls | None) -> str:
    """A hint for an error that a plaintext client gets from a TLS port (gRPC says only
    "Socket closed"), or that a TLS client gets from a plaintext one; "" otherwise."""
    if code != "UNAVAILABLE":
        return ""
    if tls is None and "Socket closed" in details:
        return (" (is that a TLS port? give the client the servers' CA: $MQ_TLS_CA, "
                "--tlsCa)")
    if tls is not None and ("handshake" in details.lower() or "ssl" in details.lower()):
        return f" (TLS handshake failed: is the port TLS, and {tls.ca_path or 'the system CAs'}"\
               " the CA that signed its certificate?)"
    return ""


def grpc_channel(address: str, tls: ClientTls | None, options: list[tuple[str, object]]
                 | None = None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.grpc_credentials(), options=options)


def aio_channel(address: str, tls: ClientTls | None,
                options: list[tuple[str, object]] | None = None,
                interceptors: list[grpc.aio.ClientInterceptor] | None = None
                ) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(address, tls.grpc_credentials(), options=options,
                                   interceptors=interceptors)


# -- a local CA ----------------------------------------------------------------------------
def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise TlsError("the openssl command is needed to make a local CA")
    try:
        subprocess.run([exe, *args], cwd=cwd, check=True, capture_output=True,
                       timeout=OPENSSL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.CalledProcessError as e:
        raise TlsError(f"openssl {args[0]} failed: {e.stderr.decode(errors='replace')[-400:]}"
                       ) from None
    except subprocess.TimeoutExpired:
        raise TlsError(f"openssl {args[0]} took over {OPENSSL_TIMEOUT_S:g} s") from None


def make_local_ca(directory: Path, names: tuple[str, ...] = LOCAL_NAMES,
                  days: int = 825) -> tuple[Path, Path, Path]:
    """A CA and one server certificate for `names` (also usable as a client certificate)
    under `directory` (kept when already there); returns (ca, cert, key) paths."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.pem", directory / "ca-key.pem"
    cert, key = directory / "server.pem", directory / "server-key.pem"
    if all(p.exists() for p in (ca, ca_key, cert, key)):
        return ca, cert, key
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", ca_key.name, "-out", ca.name, "-days", str(days),
             "-subj", "/CN=mqcluster local CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    sans = ",".join(f"IP:{n}" if n[0].isdigit() or ":" in n else f"DNS:{n}" for n in names)
    ext = directory / "server.ext"
    ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n"
                   "basicConstraints=CA:FALSE\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key.name, "-out", "server.csr", "-subj", "/CN=mqcluster", cwd=directory)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", ca.name, "-CAkey", ca_key.name,
             "-CAcreateserial", "-out", cert.name, "-days", str(days), "-extfile", ext.name,
             cwd=directory)
    for p in (ca_key, key):
        p.chmod(0o600)
    return ca, cert, key
