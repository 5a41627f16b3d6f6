"""TLS from the Airflow connection's extra, as the MySQL provider spells it, and the time limits' messages."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.source_connection import InvalidTlsSettings, SourceLimits, SourceTls, tls_from_extra


def tls(extra: dict) -> SourceTls | None:
    return tls_from_extra(extra, "mysql_cdc")


def test_no_tls_key_means_no_tls():
    assert tls({}) is None
    assert tls({"charset": "utf8mb4", "ssl": ""}) is None


@pytest.mark.parametrize(("extra", "mode"), [
    # As the client library reads the `ssl` dict: a CA means the certificate and the host name are checked.
    ({"ssl": {"ca": "/etc/ca.pem"}}, "verify_identity"),
    ({"ssl": {"ca": "/etc/ca.pem", "check_hostname": False}}, "verify_ca"),
    ({"ssl": {"ca": "/etc/ca.pem", "verify_mode": "none", "check_hostname": "false"}}, "required"),
    # Without a CA nothing is checked, but TLS is required: `ssl` was not written for a connection in clear.
    ({"ssl": {"cert": "/etc/c.pem", "key": "/etc/k.pem"}}, "required"),
    ({"ssl": {"verify_mode": "required"}}, "verify_identity"),
    # The same, as a JSON string (an extra given in a URI).
    ({"ssl": '{"ca": "/etc/ca.pem", "check_hostname": false}'}, "verify_ca"),
    # ssl_mode says it all, and needs no `ssl`.
    ({"ssl_mode": "REQUIRED"}, "required"),
    ({"ssl_mode": "preferred"}, "preferred"),
    ({"ssl_mode": "VERIFY_CA", "ssl": {"ca": "/etc/ca.pem"}}, "verify_ca"),
    ({"ssl_mode": "VERIFY_IDENTITY"}, "verify_identity"),  # the system's CAs
    ({"ssl_mode": "DISABLED", "ssl": {"ca": "/etc/ca.pem"}}, "disabled"),
    # The mysql-connector-python spelling.
    ({"ssl_ca": "/etc/ca.pem", "ssl_verify_cert": True, "ssl_verify_identity": True}, "verify_identity"),
    ({"ssl_ca": "/etc/ca.pem", "ssl_verify_identity": False}, "verify_ca"),
    ({"ssl_disabled": True}, "disabled"),
])
def test_the_mode_follows_the_extra(extra, mode):
    found = tls(extra)
    assert found is not None and found.mode == mode


def test_the_files_and_what_is_checked():
    found = tls({"ssl": {"ca": "/etc/ca.pem", "cert": "/etc/c.pem", "key": "/etc/k.pem",
                         "cipher": "ECDHE-ECDSA-AES128-GCM-SHA256"}})
    assert (found.ca, found.cert, found.key) == ("/etc/ca.pem", "/etc/c.pem", "/etc/k.pem")
    assert found.required and found.verifies_certificate and found.checks_host_name
    preferred = tls({"ssl_mode": "PREFERRED"})
    assert preferred.used and not preferred.required and not preferred.verifies_certificate
    assert found.describe() == ("TLS VERIFY_IDENTITY (ca /etc/ca.pem, cert /etc/c.pem, key /etc/k.pem, cipher "
                                "ECDHE-ECDSA-AES128-GCM-SHA256)")


@pytest.mark.parametrize(("extra", "message"), [
    ({"ssl": "{ca: /etc/ca.pem}"}, "`ssl` in the extra of the Airflow connection 'mysql_cdc' is not a JSON object"),
    ({"ssl": ["/etc/ca.pem"]}, "must be an object of TLS settings, not ['/etc/ca.pem']"),
    ({"ssl": {"ssl_ca": "/etc/ca.pem"}}, "has the key(s) 'ssl_ca', which are not TLS settings"),
    ({"ssl_capath": "/etc/certs"}, "has 'ssl_capath', which this provider does not read"),
    ({"ssl": {"ca": "/etc/ca.pem"}, "ssl_ca": "/etc/ca.pem"}, "gives TLS both as `ssl` and as ssl_ca"),
    ({"ssl_mode": "VERIFY_FULL"}, "ssl_mode in the extra of the Airflow connection 'mysql_cdc' is 'VERIFY_FULL': it "
                                  "is one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY"),
    ({"ssl": {"ca": "/etc/ca.pem", "verify_mode": "maybe"}}, "`verify_mode` of the TLS settings in the extra of "
                                                               "the Airflow connection 'mysql_cdc' is 'maybe'"),
    ({"ssl": {"ca": ""}}, "`ca` of the TLS settings"),
    ({"ssl": {"key": "/etc/k.pem"}}, "a client key but no `cert`"),
    ({"ssl": {"ca": "/etc/ca.pem", "verify_mode": False, "check_hostname": True}}, "check_hostname with verify_mode "
                                                                                   "off"),
    ({"ssl_mode": "VERIFY_IDENTITY", "ssl": {"check_hostname": False}}, "say check_hostname false, and ssl_mode "
                                                                        "VERIFY_IDENTITY says true"),
    ({"ssl_mode": "REQUIRED", "ssl_disabled": True}, "ssl_disabled true and ssl_mode REQUIRED"),
])
def test_a_bad_extra_is_refused_naming_the_key_and_value(extra, message):
    with pytest.raises(InvalidTlsSettings) as caught:
        tls(extra)
    assert message in str(caught.value)
    assert isinstance(caught.value, CdcError)  # a retry would read the same extra: the task fails at once


def test_an_encrypted_keys_passphrase_is_not_taken_from_the_extra():
    # A credential in the TLS settings would travel where the settings go (the core, messages): it is refused,
    # and its value is not shown.
    with pytest.raises(InvalidTlsSettings) as caught:
        tls({"ssl": {"cert": "/etc/c.pem", "key": "/etc/k.pem", "password": "s3cret"}})
    assert "which are not TLS settings" in str(caught.value) and "s3cret" not in str(caught.value)


def test_the_limits_messages_name_the_limit_its_value_and_the_key():
    limits = SourceLimits(statement_seconds=30, read_seconds=20)
    assert limits.answer_seconds == 50  # a statement may keep the server silent for its limit, then 20 s more
    statement = limits.statement_timed_out(("db.example", 3306))
    assert "db.example:3306" in statement and "30 s" in statement and "`source: statement_timeout_seconds:`" in statement
    binlog = limits.read_timed_out(("db.example", 3306), 20, "the binlog connection")
    assert "sent nothing for 20 s on the binlog connection" in binlog and "`source: read_timeout_seconds:`" in binlog
    assert "statement_timeout_seconds" not in binlog
    answer = limits.read_timed_out(("db.example", 3306), 50, "a statement")
    assert "50 s" in answer and "`source: statement_timeout_seconds:` and `source: read_timeout_seconds:`" in answer
