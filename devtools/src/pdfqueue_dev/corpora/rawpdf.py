"""PDF files written object by object, for corpora no PDF library would produce as they are."""

from __future__ import annotations


def assemble(objects: list[bytes], *, header: bytes = b"%PDF-1.4\n") -> bytes:
    """A PDF whose object N is `objects[N-1]` (object 1 the catalog), with its xref table."""
    out = bytearray(header)
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    size = len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)
