"""Runs moto's S3 server with conditional writes made atomic, as real S3's are.

moto checks `If-None-Match: *` and then writes, without a lock, on a threaded
server: two concurrent creates of one key can both succeed (seen in CI: two
processes committed the same version). Refract's commits rely on exactly one
winner, so every PUT of an object and every multipart completion runs under
one lock here. Arguments are moto_server's (`-H HOST -p PORT`).
"""

import functools
import threading

from moto import server
from moto.s3.responses import S3Response

_WRITE_LOCK = threading.Lock()


def _serialized(method):
    @functools.wraps(method)
    def locked(*args, **kwargs):
        with _WRITE_LOCK:
            return method(*args, **kwargs)

    return locked


S3Response.put_object = _serialized(S3Response.put_object)
S3Response._key_response_post = _serialized(S3Response._key_response_post)

if __name__ == "__main__":
    server.main()
