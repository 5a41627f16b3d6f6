"""An S3-compatible server on loopback (moto's), for an ``s3://`` work directory in tests."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

_PUTS = threading.Lock()


def _atomic_conditional_puts() -> None:
    """Make moto's PutObject decide its If-Match / If-None-Match and write in one step, as S3 does: of two writes
    racing with the same condition, one succeeds and the other gets 412. moto checks the condition, then writes,
    with nothing between, so that under its threaded server two racers could both pass (seen once in a lock race
    of tests/lock_races.py). The work store's locks rely on S3's guarantee; this gives the test server the same."""
    from moto.s3.responses import S3Response

    put_object = S3Response.put_object
    if getattr(put_object, "atomic", False):
        return

    def atomic(self: Any) -> Any:
        with _PUTS:
            return put_object(self)

    atomic.atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = atomic  # type: ignore[method-assign]


@dataclass
class S3Server:
    """moto's S3 server in a thread of this process; ``bucket`` exists once it has started."""

    bucket: str = "cdc-work"
    access_key: str = "cdc-test-key"
    secret_key: str = "cdc-test-secret"
    region: str = "us-east-1"

    def start(self) -> S3Server:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
        _atomic_conditional_puts()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        self.client().create_bucket(Bucket=self.bucket)
        return self

    def stop(self) -> None:
        self._server.stop()

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region)

    def connection_uri(self) -> str:
        """An Airflow ``aws`` connection to the server (JSON form, for an AIRFLOW_CONN_* variable)."""
        return json.dumps({"conn_type": "aws", "login": self.access_key, "password": self.secret_key,
                           "extra": {"endpoint_url": self.endpoint_url, "region_name": self.region}})
