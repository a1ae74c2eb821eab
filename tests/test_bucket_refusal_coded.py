"""A refusal is ``permission_denied`` on every path (review R20-R, R12): the store answering 401/403
(a read-only or wrong credential) is said as one, whatever call met it — a listing, a ranged read,
a head, a put, a conditional put, an append — and on every store, by one rule the conditional
clients' error mapping and the listing share (``remote.refused``), before the store's own mapping.

S3: moto behind the faulty proxy answering every request ``403 AccessDenied``. GCS and Azure: the
clients' own exceptions for a 403, handed to the shared rule and to each client's mapping."""
import errno

import pytest

from faulty_proxy import FaultyProxy, Rule
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

S3_DENIED = (403, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                  b"<Message>Access Denied</Message></Error>")


@pytest.fixture
def refusing_s3(s3_bucket, monkeypatch):
    """A logdir with one object, then a store that answers every request 403 (once the rule is on)."""
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/run/a.txt"), b"hello\n")
    s3_bucket.fs.invalidate_cache()
    proxy = FaultyProxy(upstream=s3_bucket.server.endpoint).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    rule = Rule(match=lambda method, path: True, fault=S3_DENIED, times=0)
    proxy.rules.append(rule)
    proxy.url = s3_bucket.url("logs")
    try:
        yield proxy
    finally:
        proxy.stop()


def _code(call) -> StoreError:
    with pytest.raises(StoreFailure) as e:
        call()
    return e.value.code


def test_every_s3_call_refused_is_permission_denied(refusing_s3):
    url, rule = refusing_s3.url, refusing_s3.rules[0]
    store = ObjectStore(url)
    store.prepare_writes()
    rule.times = 10 ** 6
    got = {
        "read_range": _code(lambda: store.read_range("run/a.txt", 0, 4)),
        "read_all": _code(lambda: store.read_all("run/a.txt")),
        "list": _code(lambda: list(store.list(""))),
        "list_empty": _code(lambda: list(store.list("nothing-here", shallow=True))),
        "stat": _code(lambda: store.stat("run/a.txt")),
        "put": _code(lambda: store.put("run/b.txt", b"x")),
        "put_if_absent": _code(lambda: store.put("run/c.txt", b"x", if_absent=True)),
        "put_if_version": _code(lambda: store.put("run/a.txt", b"x", if_version="0" * 32)),
        "append": _code(lambda: store.append("run/a.txt", b"more\n")),
    }
    got["delete"] = store.delete("run/a.txt")[0].code  # a delete answers per key, raising nothing
    assert got == {k: StoreError.PERMISSION for k in got}, got
    assert rule.hits > 0


def test_a_refused_read_says_the_reads_own_refusal_without_a_head(refusing_s3):
    """The GET's refusal is the answer: no HEAD is sent to ask what a refused read already said."""
    url, rule = refusing_s3.url, refusing_s3.rules[0]
    store = ObjectStore(url)
    store.prepare_writes()
    rule.times = 10 ** 6
    with pytest.raises(StoreFailure) as e:
        store.read_range("run/a.txt", 0, 4)
    assert e.value.code == StoreError.PERMISSION and e.value.key == "run/a.txt"
    assert rule.hits == 1, "one request: the refused GET"


S3_BAD_REQUEST = (400, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InvalidRequest</Code>"
                       b"<Message>Bad Request</Message></Error>")


def test_a_failed_read_whose_head_does_not_answer_says_the_reads_own_error(refusing_s3):
    """A GET that failed otherwise is followed by a HEAD (a 416 is told from a short read by the
    object's size); a HEAD that does not answer (here refused) leaves the GET's error the one
    said: ``store_error`` of the read, not the HEAD's ``permission_denied``."""
    url = refusing_s3.url
    refusing_s3.rules[:] = [Rule(match=lambda m, p: m == "GET" and "/logs/run/a.txt" in p, fault=S3_BAD_REQUEST,
                                 times=10 ** 6),
                            Rule(match=lambda m, p: m == "HEAD", fault=S3_DENIED, times=10 ** 6)]
    store = ObjectStore(url)
    with pytest.raises(StoreFailure) as e:
        store.read_range("run/a.txt", 0, 4)
    assert e.value.code == StoreError.STORE_ERROR and e.value.key == "run/a.txt"
    # said from the GET's error (s3fs's EINVAL for a 400), not from the HEAD's coded one
    assert not isinstance(e.value.__cause__, remote.RemoteError) and e.value.__cause__.errno == errno.EINVAL, \
        repr(e.value.__cause__)
    assert refusing_s3.rules[0].hits == 1 and refusing_s3.rules[1].hits == 1


def _azure_error(cls_name: str, status: int):
    from azure.core import exceptions
    from azure.core.pipeline.transport import HttpResponse

    class _Response(HttpResponse):
        def __init__(self):
            super().__init__(None, None)
            self.status_code = status
            self.reason = "Forbidden"
            self.headers = {}

        def body(self):
            return b""

    return getattr(exceptions, cls_name)(message="This request is not authorized", response=_Response())


@pytest.mark.parametrize("status", [401, 403])
def test_the_refusal_rule_takes_every_clients_401_and_403(status):
    from botocore.exceptions import ClientError

    boto = ClientError({"Error": {"Code": "AccessDenied" if status == 403 else "Unauthorized"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")
    assert remote.refused(boto)
    assert remote.refused(PermissionError(13, "Access Denied"))  # s3fs's translation of a 403
    assert remote.refused(_azure_error("HttpResponseError", status))  # 403 AuthorizationPermissionMismatch
    assert remote.refused(_azure_error("ClientAuthenticationError", status))
    # not refusals: a missing key, a lost precondition, a server error
    assert not remote.refused(ClientError({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}},
                                          "GetObject"))
    assert not remote.refused(_azure_error("HttpResponseError", 500))
    assert not remote.refused(_azure_error("ResourceModifiedError", 412))
    assert not remote.refused(FileNotFoundError(2, "no such object"))


class _FakeRFS:
    """What the conditional clients' error mapping reads of their ``RemoteFS``."""
    url, protocol, unsigned = "s3://b/logs", "s3", False


@pytest.mark.parametrize("ops_cls,make", [
    (remote._S3Ops, lambda: __import__("botocore.exceptions", fromlist=["ClientError"]).ClientError(
        {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "PutObject")),
    (remote._AzureOps, lambda: _azure_error("HttpResponseError", 403)),
    (remote._AzureOps, lambda: _azure_error("ClientAuthenticationError", 403)),
    (remote._GCSOps, lambda: PermissionError(13, "Forbidden")),
])
def test_each_conditional_client_says_a_refusal_is_permission_denied(ops_cls, make):
    ops = ops_cls.__new__(ops_cls)  # no client made: only the mapping is asked
    ops.rfs = _FakeRFS()
    err = ops._err(make(), "b/logs/x")
    assert err.code == StoreError.PERMISSION, (ops_cls.__name__, err.code, err)
