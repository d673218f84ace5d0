"""The fault proxy in front of a real SeaweedFS: requests pass byte for byte (signatures and checksums hold),
and each fault does what it says, on exactly the request it was scheduled for."""

from __future__ import annotations

import socket

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError

from s3_fault_proxy import S3FaultProxy

pytestmark = pytest.mark.slow


@pytest.fixture
def through_proxy(seaweedfs):
    with S3FaultProxy(seaweedfs.endpoint_url) as proxy:
        client = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            aws_access_key_id=seaweedfs.access_key,
            aws_secret_access_key=seaweedfs.secret_key,
            region_name="us-east-1",
            config=Config(retries={"total_max_attempts": 1}),  # every fault reaches the test
        )
        yield proxy, client, seaweedfs.client()


def test_requests_pass_unchanged(through_proxy):
    proxy, client, direct = through_proxy
    data = bytes(range(256)) * 400
    client.put_object(Bucket="eagle", Key="proxy/a=1/x.bin", Body=data, ChecksumAlgorithm="SHA256")
    assert direct.get_object(Bucket="eagle", Key="proxy/a=1/x.bin")["Body"].read() == data
    head = client.head_object(Bucket="eagle", Key="proxy/a=1/x.bin")
    assert head["ContentLength"] == len(data)
    assert client.get_object(Bucket="eagle", Key="proxy/a=1/x.bin")["Body"].read() == data
    assert proxy.stats.requests == {"PUT": 1, "HEAD": 1, "GET": 1} and not proxy.stats.faults


def test_each_fault_on_the_request_it_was_scheduled_for(through_proxy):
    proxy, client, direct = through_proxy
    proxy.schedule("PUT", "/proxy/f/", 2, "slow_down")
    proxy.schedule("PUT", "/proxy/f/", 3, "reset_before")
    proxy.schedule("PUT", "/proxy/f/", 4, "reset_after")
    proxy.schedule("GET", "/proxy/f/", 1, "internal_error")
    client.put_object(Bucket="eagle", Key="proxy/f/1", Body=b"1")  # the first passes
    with pytest.raises(ClientError) as slow:
        client.put_object(Bucket="eagle", Key="proxy/f/2", Body=b"2")
    assert slow.value.response["Error"]["Code"] == "SlowDown"
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket="eagle", Key="proxy/f/3", Body=b"3")
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket="eagle", Key="proxy/f/4", Body=b"4")
    stored = {o["Key"] for o in direct.list_objects_v2(Bucket="eagle", Prefix="proxy/f/")["Contents"]}
    assert stored == {"proxy/f/1", "proxy/f/4"}  # reset_after: committed, though the client never heard it
    with pytest.raises(ClientError) as internal:
        client.get_object(Bucket="eagle", Key="proxy/f/1")
    assert internal.value.response["Error"]["Code"] == "InternalError"
    assert client.get_object(Bucket="eagle", Key="proxy/f/1")["Body"].read() == b"1"
    injected = [fault for _, _, fault in proxy.stats.injected]
    assert injected == ["slow_down", "reset_before", "reset_after", "internal_error"]


def test_rates_inject_a_share_of_requests(through_proxy):
    proxy, client, _ = through_proxy
    proxy.set_rates({"internal_error": 0.5})
    failed = 0
    for i in range(40):
        try:
            client.put_object(Bucket="eagle", Key=f"proxy/r/{i}", Body=b"x")
        except ClientError:
            failed += 1
    assert failed == proxy.stats.faults["internal_error"] and 8 <= failed <= 32
    with pytest.raises(ValueError, match="fault rates"):
        proxy.set_rates({"teapot": 0.1})


def test_a_chunked_body_is_refused_with_a_log_line_not_forwarded(caplog):
    """boto3 sends none over http; one that came would otherwise be forwarded cut short."""
    with S3FaultProxy("http://127.0.0.1:9") as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(b"PUT /eagle/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
        try:
            answer = sock.recv(100)
        except ConnectionResetError:
            answer = b""
    assert answer == b"" and not proxy.stats.requests
    assert "reads Content-Length bodies only, not PUT /eagle/k chunked" in caplog.text
