"""The ABI grows without breaking its clients (docs/abi.md, "Growing the ABI").

A client built against the ABI 2.0 header (frozen in abi_v2/) keeps working; every
payload's reserved and pad space must be zero; sizes between a command's first
version and today's are taken and answered at the client's size; new device facts
come from GET_PARAM by id.
"""
import errno
import hashlib
import os
import re
import struct
from pathlib import Path

import cffi
import pytest

import libnpu
from kmd_fuse import ioctls, uapi

V2_HEADER = Path(__file__).with_name("abi_v2") / "npu_uapi.h"
V2_TEXT = V2_HEADER.read_text()
v2 = cffi.FFI()
v2.cdef(uapi._cdef_source(V2_TEXT))
V2_COMMANDS = {name: int(value, 16) for name, value in re.findall(r"#define NPU_CMD_(\w+)\s+(0x[0-9a-f]+)", V2_TEXT)}


def v2_struct(name: str) -> str:
    return f"struct npu_{name.lower()}"


class RawClient:
    def __init__(self, node):
        self.fd = os.open(node, os.O_RDWR)
        self.seq = 0

    def call(self, cmd: int, body: bytes) -> tuple[int, int, bytes]:
        """(result, cmd echoed, reply payload) of one request with this exact payload."""
        self.seq += 1
        os.write(self.fd, uapi.pack_frame_body(cmd, self.seq, body))
        while True:
            try:
                frame = os.read(self.fd, uapi.NPU_MAX_FRAME)
                break
            except BlockingIOError:
                continue
        _, reply_cmd, seq, size, result, _ = uapi.header_fields(frame)
        assert seq == self.seq and size == len(frame) - uapi.HDR_SIZE
        return result, reply_cmd, frame[uapi.HDR_SIZE:]

    def v2_call(self, name: str, payload) -> int:
        """A request as an ABI 2.0 client makes it: its number, its struct; the reply fills ``payload``."""
        size = v2.sizeof(payload[0])
        result, cmd, body = self.call(V2_COMMANDS[name], bytes(v2.buffer(payload)))
        assert cmd == V2_COMMANDS[name]
        if body:
            assert len(body) == size           # answered at the size the client sent
            v2.memmove(payload, body, size)
        return result

    def close(self):
        os.close(self.fd)


@pytest.fixture
def raw(npu):
    client = RawClient(npu.node)
    yield client
    client.close()


def test_the_frozen_header_is_the_one_abi_2_0_shipped():
    frozen = "2156bfa57574b30935f87f700c8b936b216bbdcf729c7581e5be339d71ebcd4d"
    assert hashlib.sha256(V2_HEADER.read_bytes()).hexdigest() == frozen


def test_v2_structs_are_prefixes_of_todays():
    for name, number in V2_COMMANDS.items():
        command = uapi.COMMANDS_BY_NR[number & 0xFF]
        assert command.name == name and command.min_size == v2.sizeof(v2_struct(name))
        old, new = v2.typeof(v2_struct(name)).fields, dict(uapi.ffi.typeof(command.struct).fields)
        for field_name, field in old:
            assert new[field_name].offset == field.offset, f"{name}.{field_name} moved"
            assert uapi.ffi.sizeof(new[field_name].type) == v2.sizeof(field.type), f"{name}.{field_name} resized"


def test_v2_client_runs_every_command(raw):
    info = v2.new("struct npu_get_info *")
    assert raw.v2_call("GET_INFO", info) == 0
    assert info.abi_version == uapi.NPU_ABI_VERSION and v2.string(info.model) == b"npu-emu"
    alloc = v2.new("struct npu_mem_alloc *", {"size": 8192})
    assert raw.v2_call("MEM_ALLOC", alloc) == 0 and alloc.alloc_size == 8192
    mapping = v2.new("struct npu_mem_map *", {"handle": alloc.handle})
    assert raw.v2_call("MEM_MAP", mapping) == 0 and mapping.size == 8192 and mapping.token
    stats = v2.new("struct npu_get_stats *")
    assert raw.v2_call("GET_STATS", stats) == 0 and stats.buffers == 1
    submit = v2.new("struct npu_submit *", {"flags": uapi.NPU_SUBMIT_WAIT})
    assert raw.v2_call("SUBMIT", submit) == 0 and submit.fence == 1 and submit.status == 0
    submit.flags = 0
    assert raw.v2_call("SUBMIT", submit) == 0 and submit.fence == 2
    wait = v2.new("struct npu_wait *", {"count": 2, "timeout_ns": 5 * 10**9})
    wait.fences[0], wait.fences[1] = 1, 2
    assert raw.v2_call("WAIT", wait) == 0 and wait.signaled == 2 and list(wait.status)[:2] == [0, 0]
    free = v2.new("struct npu_mem_free *", {"handle": alloc.handle})
    assert raw.v2_call("MEM_FREE", free) == 0
    assert raw.v2_call("MEM_FREE", free) == -errno.ENOENT
    reset = v2.new("struct npu_reset *")
    assert raw.v2_call("RESET", reset) == 0 and reset.reset_count == info.reset_count + 1


@pytest.mark.parametrize("name", sorted(c.name for c in uapi.COMMANDS.values()))
def test_nonzero_reserved_or_pad_is_einval(raw, name):
    command = next(c for c in uapi.COMMANDS.values() if c.name == name)
    assert command.reserved_ranges, f"{name} has no reserved space to grow into"
    for offset, length in command.reserved_ranges:
        body = bytearray(command.payload_size)
        body[offset + length - 1] = 1
        result, _, reply = raw.call(command.number, bytes(body))
        assert result == -errno.EINVAL and reply == b"", (name, offset)


def with_size(command: uapi.Command, size: int) -> int:
    """The command's number as a client whose struct has ``size`` bytes spells it."""
    return (command.number & ~(0x3FFF << 16)) | (size << 16)


def test_sizes_from_first_version_to_newer_clients(raw):
    get_info = uapi.COMMANDS[uapi.NPU_CMD_GET_INFO]
    small = get_info.min_size - 8
    assert raw.call(with_size(get_info, small), bytes(small))[0] == -errno.EINVAL
    big = get_info.payload_size + 16             # a newer client: fields this driver lacks, left 0
    result, cmd, reply = raw.call(with_size(get_info, big), bytes(big))
    assert result == 0 and cmd == with_size(get_info, big) and len(reply) == big
    assert reply[get_info.payload_size:] == bytes(16)
    assert struct.unpack_from("<I", reply)[0] == uapi.NPU_ABI_VERSION
    assert raw.call(with_size(get_info, big), bytes(big - 1) + b"\x01")[0] == -errno.E2BIG
    # the number's size and the frame's payload must agree
    assert raw.call(get_info.number, bytes(get_info.payload_size + 8))[0] == -errno.EINVAL


def test_get_param_answers_known_ids_and_refuses_others(npu):
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        info = dev.info()
        for name in ("abi_version", "num_cores", "clock_mhz", "ring_entries", "page_size", "memory_total"):
            assert dev.param(name) == info[name], name
        assert dev.param("MAX_JOB_TIMEOUT_MS") == 10_000 and dev.param("DEFAULT_JOB_TIMEOUT_MS") == 5000
        assert dev.param(uapi.NPU_PARAM_MAX_SUBMIT_BOS) == uapi.NPU_MAX_SUBMIT_BOS
        assert dev.param("MAX_OUTSTANDING") == 64
        with pytest.raises(libnpu.NpuError) as exc:
            dev.param(max(uapi.PARAMS) + 1)
        assert exc.value.errno == errno.EINVAL
        with pytest.raises(ValueError):
            dev.param("NO_SUCH_FACT")


def test_command_table_is_the_headers_command_list():
    names = [c.name for c in sorted(uapi.COMMANDS.values(), key=lambda c: c.nr)]
    assert names == re.findall(r"#define NPU_CMD_(\w+)", uapi.HEADER_PATH.read_text())
    assert list(ioctls.IOCTLS) == names
    assert [name for name, entry in ioctls.IOCTLS.items() if entry.owner_only] == ["RESET"]
    with pytest.raises(ImportError, match="_IOWR gives"):
        uapi._read_commands("#define NPU_CMD_GET_INFO  0xc0784e00\n")    # 2.0's number for today's struct
