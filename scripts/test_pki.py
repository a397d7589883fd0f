"""Throw-away certificates for the end-to-end scripts, made with the `openssl` command line
(Debian package openssl): a CA, server certificates for 127.0.0.1, client certificates, and
a second CA whose certificates the first one's servers must refuse. Keys are P-256 and
mode 0600; certificates are valid for two days.

    pki = Pki(directory)
    server = pki.leaf("echo-0", server=True)    # {"cert": path, "key": path}
    client = pki.leaf("fleet-0")                # client certificate of the same CA
    rogue = Pki(other_directory, "rogue CA").leaf("fleet-0")   # same name, wrong CA
"""

import os
import subprocess


def _openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {r.stderr}")


class Pki:
    def __init__(self, directory, name="ingero test CA"):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca = os.path.join(directory, "ca.pem")
        self._ca_key = os.path.join(directory, "ca.key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", self._ca_key, "-out", self.ca, "-days", "2", "-subj", f"/CN={name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        os.chmod(self._ca_key, 0o600)
        self._serial = 100

    def leaf(self, name, server=False, dns=()):
        """A certificate of this CA for `name`: a server certificate (SAN 127.0.0.1,
        localhost and the names in `dns`; serverAuth) or a client certificate (clientAuth)."""
        self._serial += 1
        base = os.path.join(self.dir, name)
        key, csr, ext, cert = (base + s for s in (".key", ".csr", ".ext", ".pem"))
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        os.chmod(key, 0o600)
        with open(ext, "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n")
            if server:
                sans = ",".join(["IP:127.0.0.1", "DNS:localhost", *(f"DNS:{d}" for d in dns)])
                f.write(f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        _openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self._ca_key,
                 "-set_serial", str(self._serial), "-days", "2", "-extfile", ext, "-out", cert)
        return {"cert": cert, "key": key}
