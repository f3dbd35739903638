"""Unpacks Debian packages (.deb: an ar archive holding data.tar.*) into a prefix, without dpkg.

  python3 tools/gpu/unpack_deb.py PREFIX FILE.deb...

The GPU machine's image may lack dpkg; Python's tarfile reads the xz/gz/bz2 data archives Debian uses.
"""

import io
import sys
import tarfile


def data_tar(deb: bytes) -> bytes:
    if not deb.startswith(b"!<arch>\n"):
        raise SystemExit("unpack_deb.py: not an ar archive (a .deb file)")
    pos = 8
    while pos + 60 <= len(deb):
        header = deb[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = deb[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            return body
        pos += 60 + size + (size & 1)  # members are 2-byte aligned
    raise SystemExit("unpack_deb.py: no data.tar member")


def main() -> None:
    prefix, debs = sys.argv[1], sys.argv[2:]
    for path in debs:
        with open(path, "rb") as f, tarfile.open(fileobj=io.BytesIO(data_tar(f.read()))) as tar:
            # Debian's own archives (fetch_deps.sh); "data" refuses members that would land outside prefix.
            tar.extractall(prefix, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


if __name__ == "__main__":
    main()
