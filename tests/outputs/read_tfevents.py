#!/usr/bin/python3
"""Independent reader of TensorBoard event files, for ddprun's tests.

Standard library only: parses the TFRecord framing, checks every length and
data CRC (a bitwise CRC-32C, not the table of the C++ writer), decodes the
Event / Summary protobuf fields by hand and prints the records as JSON:

  {"records": [{"wall_time": .., "step": .., "file_version": ..,
                "session_log_status": .. (1 = START),
                "values": [{"tag": .., "simple_value": ..} |
                           {"tag": .., "image": {"height", "width",
                            "colorspace", "png_width", "png_height",
                            "png_bytes"}}]}],
   "truncated": false}

A record cut short at the end of the file is where reading stops
("truncated": true, exit 0), as TensorBoard does. A CRC mismatch or a record
that is not a valid Event exits 1 with one line on stderr naming the byte
offset.
"""
import json
import struct
import sys


class Damaged(Exception):
    pass


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise Damaged("varint runs past the end of a message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Damaged("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Damaged("field number 0")
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise Damaged("fixed64 runs past the end")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            if pos + n > len(buf):
                raise Damaged("length-delimited field runs past the end")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise Damaged("fixed32 runs past the end")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise Damaged("unknown wire type %d" % wire)
        yield number, wire, value


def signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def png_size(png):
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise Damaged("image is not a PNG")
    return struct.unpack(">II", png[16:24])


def decode_image(buf):
    image = {}
    for number, wire, value in fields(buf):
        if number in (1, 2, 3) and wire == 0:
            image[{1: "height", 2: "width", 3: "colorspace"}[number]] = value
        elif number == 4 and wire == 2:
            w, h = png_size(value)
            image.update(png_width=w, png_height=h, png_bytes=len(value))
    return image


def decode_value(buf):
    value = {}
    for number, wire, v in fields(buf):
        if number == 1 and wire == 2:
            value["tag"] = v.decode("utf-8")
        elif number == 2 and wire == 5:
            value["simple_value"] = struct.unpack("<f", v)[0]
        elif number == 4 and wire == 2:
            value["image"] = decode_image(v)
    return value


def decode_event(buf):
    event = {"wall_time": 0.0, "step": 0, "values": []}
    for number, wire, value in fields(buf):
        if number == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            event["step"] = signed64(value)
        elif number == 3 and wire == 2:
            event["file_version"] = value.decode("utf-8")
        elif number == 5 and wire == 2:
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    event["values"].append(decode_value(v))
        elif number == 7 and wire == 2:
            event["session_log_status"] = 0
            for n, w, v in fields(value):
                if n == 1 and w == 0:
                    event["session_log_status"] = v
    return event


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    records, pos, truncated = [], 0, False
    while pos < len(data):
        if len(data) - pos < 12:
            truncated = True
            break
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked_crc(header):
            raise Damaged("byte %d: length CRC mismatch" % pos)
        end = pos + 12 + length
        if end + 4 > len(data):
            truncated = True
            break
        body = data[pos + 12:end]
        (data_crc,) = struct.unpack("<I", data[end:end + 4])
        if data_crc != masked_crc(body):
            raise Damaged("byte %d: data CRC mismatch" % pos)
        try:
            records.append(decode_event(body))
        except Damaged as e:
            raise Damaged("byte %d: not an Event: %s" % (pos, e))
        pos = end + 4
    return {"records": records, "truncated": truncated}


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: read_tfevents.py EVENT_FILE\n")
        return 2
    try:
        result = read(sys.argv[1])
    except Damaged as e:
        sys.stderr.write("%s: %s\n" % (sys.argv[1], e))
        return 1
    except OSError as e:
        sys.stderr.write("%s\n" % e)
        return 1
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
