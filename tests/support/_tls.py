"""
TLS for the clients' tests: a throwaway CA made in the test (no network, no
file from elsewhere), a server certificate it signs, and a TLS listener in
front of any web resource (the gardend stand-in's gateway).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from attrs import frozen
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet.interfaces import IListeningPort
from twisted.internet.ssl import PrivateCertificate
from twisted.web.server import Site


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


@frozen
class ThrowawayCA:
    """
    A certificate authority that lives for one test.
    """

    key: Any
    certificate: x509.Certificate

    @classmethod
    def make(cls, name: str = "vehicle test CA") -> "ThrowawayCA":
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @property
    def pem(self) -> bytes:
        return _pem(self.certificate)

    def writePEM(self, path: Path) -> Path:
        path.write_bytes(self.pem)
        return path

    def serverCertificate(self, *names: str) -> PrivateCertificate:
        """
        A server certificate for C{names} (DNS names or IP addresses),
        signed by this CA, with its key, as Twisted takes it.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        alternatives: list[x509.GeneralName] = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(names[0]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        keyPEM = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return PrivateCertificate.loadPEM(_pem(certificate) + keyPEM)


def listenTLS(
    reactor: Any, resource: Any, certificate: PrivateCertificate, testCase: Any
) -> tuple[IListeningPort, int]:
    """
    Serve C{resource} over TLS with C{certificate} on a loopback port (closed
    at the test's end); the port and its number.
    """
    port = reactor.listenSSL(0, Site(resource), certificate.options(), interface="127.0.0.1")
    testCase.addCleanup(port.stopListening)
    return port, port.getHost().port
