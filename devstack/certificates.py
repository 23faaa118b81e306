"""Certificates like Heroku's, made on the spot for a local TLS broker and tests.

A CA signs a broker certificate whose names do not match the host clients dial
(as on Heroku) and client certificates whose keys come as PKCS#1 PEM (as
Heroku hands them out) or PKCS#8.
"""

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_FORMATS = {
    "pkcs1": serialization.PrivateFormat.TraditionalOpenSSL,  # BEGIN RSA PRIVATE KEY
    "pkcs8": serialization.PrivateFormat.PKCS8,  # BEGIN PRIVATE KEY
}


@dataclass(frozen=True)
class Issued:
    cert_pem: str
    key_pem: str


class CertificateAuthority:
    def __init__(self, name="local-test-ca"):
        self._key = _new_key()
        subject = _name(name)
        now = datetime.datetime.now(datetime.timezone.utc)
        self._certificate = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            # The key identifiers RFC 5280 asks for, which Python 3.13's
            # default contexts verify (VERIFY_X509_STRICT).
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self):
        return self._certificate.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, common_name, *, dns_names=(), server=False, key_format="pkcs1"):
        key = _new_key()
        now = datetime.datetime.now(datetime.timezone.utc)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(self._certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
        )
        if dns_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(name) for name in dns_names]), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        return Issued(
            cert_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
            key_pem=key.private_bytes(serialization.Encoding.PEM, KEY_FORMATS[key_format],
                                      serialization.NoEncryption()).decode(),
        )


def _new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
