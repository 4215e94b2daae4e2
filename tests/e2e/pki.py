"""A test certificate authority made with the `openssl` CLI in a test's tmp dir, for the TLS and
SASL_SSL suites. No key is ever committed."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args, cwd: Path):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Pki:
    """A test CA and leaf certificates it signs (EC P-256, valid two days)."""

    def __init__(self, root: Path):
        self.dir = root / "pki"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = self.dir / "ca.pem"
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=ferry-test-ca",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)

    def leaf(self, name: str, cn: str) -> tuple[Path, Path, Path]:
        """(cert, key, keystore) for `cn`, valid for localhost and 127.0.0.1; the keystore is
        the key and the certificate in one PEM file, as `ssl.keystore.location` takes it."""
        ext = self.dir / f"{name}.ext"
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        )
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/O=ferry/CN={cn}",
                 cwd=self.dir)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", ext.name,
                 cwd=self.dir)
        cert, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        keystore = self.dir / f"{name}-keystore.pem"
        keystore.write_text(key.read_text() + cert.read_text())
        return cert, key, keystore
