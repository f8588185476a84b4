"""The byte encoding of state values: codecs shared with every Weir SDK.

The host stores state as opaque bytes; a codec fixes how Python values
become those bytes. The encoding is part of Weir's contract (wit/README.md,
"State value encoding"; ``sdk/src/codec.rs`` is the reference), so state
written by an operator in Rust reads correctly here and the other way round:

=========================  ==========================================================
codec                      bytes
=========================  ==========================================================
``U8`` ... ``U64``         little-endian, fixed width (1, 2, 4 or 8 bytes)
``I8`` ... ``I64``         little-endian two's complement, fixed width
``F32``, ``F64``           IEEE 754 bits, little-endian (4 or 8 bytes)
``BOOL``                   one byte: 0 false, 1 true (any other byte is an error)
``STR``                    UTF-8, no length prefix (invalid UTF-8 is an error)
``BYTES``                  the bytes as they are
``UNIT``                   no bytes (``None``)
=========================  ==========================================================

A codec is any object with ``encode(value) -> bytes`` and
``decode(bytes) -> value``; write your own for other types. ``JSON``
(compact JSON in UTF-8) is not part of the shared table: it is for bytes
only the same operator reads back, such as a window function's accumulator
(``AggregateFunction.ACCUMULATOR``, its default). Decoding raises :class:`DecodeError`, whose message
is the Rust SDK's (``cannot decode u64: expected 8 bytes, got 3``).

Note for map state: entries are ordered by the user key's *bytes*, so
little-endian integer keys do not come back in numeric order.
"""

import struct


class DecodeError(ValueError):
    """Stored bytes that are not a valid encoding of the requested type."""

    def __init__(self, type_name, reason):
        super().__init__(f"cannot decode {type_name}: {reason}")


class EncodeError(ValueError):
    """A value the codec cannot encode (out of range, wrong type)."""


class FixedWidth:
    """A fixed-width little-endian number (``struct`` format ``fmt``).

    ``struct`` is the compiled ``struct.Struct``: value states use its
    ``pack``/``unpack`` directly, which saves a Python call per access."""

    __slots__ = ("name", "size", "struct")

    def __init__(self, name, fmt):
        self.name = name
        self.struct = struct.Struct("<" + fmt)
        self.size = self.struct.size

    def encode(self, value):
        try:
            return self.struct.pack(value)
        except struct.error as e:
            raise EncodeError(f"cannot encode {value!r} as {self.name}: {e}") from None

    def decode(self, data):
        if len(data) != self.size:
            raise DecodeError(self.name, f"expected {self.size} bytes, got {len(data)}")
        return self.struct.unpack(data)[0]

    def __repr__(self):
        return self.name.upper()


class _Bool:
    __slots__ = ()
    name = "bool"

    def encode(self, value):
        return b"\x01" if value else b"\x00"

    def decode(self, data):
        if len(data) != 1:
            raise DecodeError("bool", f"expected 1 bytes, got {len(data)}")
        if data[0] > 1:
            raise DecodeError("bool", f"invalid byte {data[0]}")
        return data[0] == 1

    def __repr__(self):
        return "BOOL"


class _Str:
    __slots__ = ()
    name = "String"

    def encode(self, value):
        return value.encode("utf-8")

    def decode(self, data):
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError("String", str(e)) from None

    def __repr__(self):
        return "STR"


class _Bytes:
    __slots__ = ()
    name = "bytes"

    def encode(self, value):
        return bytes(value)

    def decode(self, data):
        return bytes(data)

    def __repr__(self):
        return "BYTES"


class _Unit:
    __slots__ = ()
    name = "()"

    def encode(self, value):
        return b""

    def decode(self, data):
        if data:
            raise DecodeError("()", f"expected 0 bytes, got {len(data)}")

    def __repr__(self):
        return "UNIT"


class _Json:
    """Compact JSON in UTF-8 (``json.dumps(..., separators=(",", ":"))``).
    Tuples come back as lists; JSON has no bytes."""

    __slots__ = ()
    name = "JSON"

    def encode(self, value):
        import json  # here, not at the top: keeps `json` out of components that never use it

        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise EncodeError(f"cannot encode {value!r} as JSON: {e}") from None

    def decode(self, data):
        import json

        try:
            return json.loads(bytes(data))
        except ValueError as e:  # also UnicodeDecodeError
            raise DecodeError("JSON", str(e)) from None

    def __repr__(self):
        return "JSON"


U8 = FixedWidth("u8", "B")
U16 = FixedWidth("u16", "H")
U32 = FixedWidth("u32", "I")
U64 = FixedWidth("u64", "Q")
I8 = FixedWidth("i8", "b")
I16 = FixedWidth("i16", "h")
I32 = FixedWidth("i32", "i")
I64 = FixedWidth("i64", "q")
F32 = FixedWidth("f32", "f")
F64 = FixedWidth("f64", "d")
BOOL = _Bool()
STR = _Str()
BYTES = _Bytes()
UNIT = _Unit()
JSON = _Json()
