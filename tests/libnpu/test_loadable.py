import struct
import zlib

import numpy as np
import pytest

from libnpu.loadable import (
    MAGIC,
    VERSION,
    BadMagicError,
    ChecksumError,
    DataReloc,
    FormatError,
    Loadable,
    LoadableError,
    MemoryRegion,
    RegionKind,
    Reloc,
    Task,
    TensorDesc,
    TensorFlags,
    TruncatedError,
    VersionError,
)


def _sample() -> Loadable:
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, 16 * 27, dtype=np.int8).tobytes()
    b = rng.integers(-1000, 1000, 16, dtype=np.int32).tobytes()
    regions = [
        MemoryRegion("weights", RegionKind.WEIGHTS, 4096, 4096, w + bytes(64 - len(w) % 64) + b),
        MemoryRegion("activations", RegionKind.ACTIVATIONS, 1 << 16, 64),
        MemoryRegion("input", RegionKind.INPUT, 3072, 64),
        MemoryRegion("output", RegionKind.OUTPUT, 10, 64),
    ]
    off_b = len(w) + (64 - len(w) % 64)
    tensors = [
        TensorDesc("input", (1, 32, 32, 3), "int8", 2, 0, None, np.array([0.0078125], np.float32),
                   np.array([0]), flags=TensorFlags.INPUT),
        TensorDesc("conv/w", (16, 3, 3, 3), "int8", 0, 0, None, rng.random(16).astype(np.float32) + 0.01,
                   np.zeros(16, np.int64), axis=0, flags=TensorFlags.CONSTANT),
        TensorDesc("conv/b", (16,), "int32", 0, off_b, flags=TensorFlags.CONSTANT),
        TensorDesc("act0", (1, 32, 32, 16), "int8", 1, 0, (16384, 512, 16, 1)),
        TensorDesc("out", (1, 10), "int8", 3, 0, None, np.array([1 / 256], np.float32), np.array([-128]),
                   flags=TensorFlags.OUTPUT),
    ]
    tasks = [
        Task("conv", "CONV_2D", 3, bytes(range(40)), [], [0, 1, 2, 3], macs=442368, bytes_moved=5000,
             meta={"pads": [1, 1, 1, 1]}, relocs=[Reloc(8, 2, 0), Reloc(16, 0, 0), Reloc(24, 1, 0)]),
        Task("fc", "FULLY_CONNECTED", 9, b"\x01" * 20, [0], [3, 4], macs=160, core=1,
             relocs=[Reloc(0, 1, 0), Reloc(8, 3, 0)]),
    ]
    table = [DataReloc(0, 1024, 1, 0), DataReloc(0, 1032, 3, 8)]  # an address table in the weights
    regions[0].content += bytes(1040 - len(regions[0].content))
    return Loadable("resnet-mini", tensors, regions, tasks, {"source_sha256": "ab" * 32, "compiler": "0.1"},
                    table)


def test_round_trip_bytes_and_file(tmp_path):
    src = _sample()
    data = src.to_bytes()
    assert data[:8] == MAGIC
    for got in (Loadable.from_bytes(data), _saved(tmp_path, src)):
        assert got.name == src.name and got.metadata == src.metadata
        assert [t.name for t in got.tensors] == [t.name for t in src.tensors]
        for a, b in zip(got.tensors, src.tensors):
            assert (a.shape, a.dtype, a.region, a.offset, a.strides, a.flags, a.axis) == \
                   (b.shape, b.dtype, b.region, b.offset, b.strides, b.flags, b.axis)
            if b.scale is None:
                assert a.scale is None and a.zero_point is None
            else:
                np.testing.assert_array_equal(a.scale, b.scale)
                np.testing.assert_array_equal(a.zero_point, b.zero_point)
        for a, b in zip(got.regions, src.regions):
            assert (a.name, a.kind, a.size, a.alignment) == (b.name, b.kind, b.size, b.alignment)
            assert (a.content is None) == (b.content is None)
            if b.content is not None:
                assert bytes(a.content) == bytes(b.content)
        assert got.tasks == src.tasks
        assert [t.name for t in got.inputs()] == ["input"] and [t.name for t in got.outputs()] == ["out"]
    # Serialization is deterministic: re-encoding what was read gives the same bytes.
    assert Loadable.from_bytes(data).to_bytes() == data


def _saved(tmp_path, ld: Loadable) -> Loadable:
    path = tmp_path / "m.nlb"
    ld.save(path)
    return Loadable.load(path)


def test_weights_are_page_aligned_and_mappable(tmp_path):
    src = _sample()
    path = tmp_path / "m.nlb"
    src.save(path)
    raw = path.read_bytes()
    got = Loadable.load(path)
    content = got.regions[0].content
    assert isinstance(content, memoryview)  # a view into the mapped file, not a copy
    pos = raw.find(bytes(src.regions[0].content))
    assert pos % 4096 == 0
    w = np.frombuffer(content, np.int8, 16 * 27).reshape(16, 3, 3, 3)
    np.testing.assert_array_equal(w.reshape(-1), np.frombuffer(src.regions[0].content, np.int8, 16 * 27))


def _sections(data: bytes) -> list[tuple[int, int, int]]:
    # header: magic 8s, major H, minor H, flags I, header size I, section count I, file size Q, table Q
    nsec, table = struct.unpack_from("<I", data, 20)[0], struct.unpack_from("<Q", data, 32)[0]
    return [struct.unpack_from("<IIQQII", data, table + 32 * i)[:4] for i in range(nsec)]


def _fix_header_crc(buf: bytearray) -> None:
    buf[60:64] = struct.pack("<I", zlib.crc32(bytes(buf[:60])))


def test_truncated_files():
    data = _sample().to_bytes()
    for n in (0, 4, 30, 63, 64, 200, len(data) // 2, len(data) - 1):
        with pytest.raises((TruncatedError, BadMagicError)) as exc:
            Loadable.from_bytes(data[:n])
        if n >= 8:
            assert isinstance(exc.value, TruncatedError), n
            assert "bytes" in str(exc.value)


def test_bad_magic_and_versions():
    data = bytearray(_sample().to_bytes())
    with pytest.raises(BadMagicError, match="not an NPU loadable"):
        Loadable.from_bytes(b"PK\x03\x04" + bytes(data[4:]))
    for major, minor in ((2, 0), (0, 9), (1, VERSION[1] + 1)):   # a newer minor: fields this reader lacks
        buf = bytearray(data)
        buf[8:12] = struct.pack("<HH", major, minor)
        _fix_header_crc(buf)
        with pytest.raises(VersionError, match=f"version {major}.{minor}"):
            Loadable.from_bytes(bytes(buf))
    for minor in range(VERSION[1] + 1):               # every older minor still reads
        buf = bytearray(data)
        buf[8:12] = struct.pack("<HH", 1, minor)
        _fix_header_crc(buf)
        assert Loadable.from_bytes(bytes(buf)).name == _sample().name


def test_every_byte_flip_in_header_and_table_is_caught():
    data = _sample().to_bytes()
    table_end = 64 + 32 * 12
    for pos in range(table_end):
        buf = bytearray(data)
        buf[pos] ^= 0x40
        with pytest.raises(LoadableError):
            Loadable.from_bytes(bytes(buf))


def test_every_single_byte_flip_is_caught():
    data = _sample().to_bytes()
    for pos in range(len(data)):
        buf = bytearray(data)
        buf[pos] ^= 0x01
        with pytest.raises(LoadableError):
            Loadable.from_bytes(bytes(buf))


def test_corruption_in_each_section_names_it():
    data = _sample().to_bytes()
    names = ["META", "STRINGS", "TENSORS", "REGIONS", "TASKS", "INDICES", "QUANT_SCALE", "QUANT_ZP",
             "PAYLOAD", "WEIGHTS", "RELOCS", "DATA_RELOCS", "HOST", "HOST_DATA"]
    for kind, _, off, size in _sections(data):
        if size == 0:
            continue
        buf = bytearray(data)
        buf[off + size // 2] ^= 0xFF
        with pytest.raises(ChecksumError, match=f"section {names[kind - 1]} checksum"):
            Loadable.from_bytes(bytes(buf))


def test_inconsistent_contents_rejected():
    ld = _sample()
    ld.tasks[0].deps = [1]  # depends on a later task: not a valid order
    with pytest.raises(FormatError, match="task 0 .*dependency 1"):
        ld.to_bytes()
    ld = _sample()
    ld.tensors[3].offset = (1 << 16) - 10  # runs past the activation region
    with pytest.raises(FormatError, match="tensor 3 .*outside region 'activations'"):
        ld.to_bytes()
    ld = _sample()
    ld.regions[1].alignment = 48
    with pytest.raises(FormatError, match="alignment 48"):
        ld.to_bytes()
    ld = _sample()
    ld.tasks[1].tensors = [99]
    with pytest.raises(FormatError, match="tensor 99 does not exist"):
        ld.to_bytes()


def test_load_missing_or_empty_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        Loadable.load(tmp_path / "none.nlb")
    (tmp_path / "empty.nlb").write_bytes(b"")
    with pytest.raises(BadMagicError):
        Loadable.load(tmp_path / "empty.nlb")


def test_a_failed_save_names_the_path_and_leaves_no_temporary_file(tmp_path):
    """(Before: the error named `<path>.<pid>.tmp`, and a failed rename left that file.)"""
    (tmp_path / "taken.nlb").mkdir()                         # the rename fails: a directory is there
    for path in (tmp_path / "taken.nlb", tmp_path / "missing" / "m.nlb"):
        with pytest.raises(OSError) as caught:
            _sample().save(path)
        assert caught.value.filename == str(path) and ".tmp" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.nlb"]


def test_command_buffer_applies_relocations():
    ld = Loadable.from_bytes(_sample().to_bytes())
    bases = [0x10000, 0x20000, 0x30000, 0x40000]
    cmd = ld.command_buffer(bases)
    assert len(cmd) == 40 + 20
    assert struct.unpack_from("<QQQ", cmd, 8) == (0x30000, 0x10000, 0x20000)
    assert cmd[:8] == bytes(range(8)) and cmd[32:40] == bytes(range(32, 40))
    assert struct.unpack_from("<QQ", cmd, 40) == (0x20000, 0x40000)
    assert cmd[56:] == b"\x01" * 4
    with pytest.raises(FormatError, match="4 regions"):
        ld.command_buffer(bases[:3])


def test_bad_relocations_rejected():
    ld = _sample()
    ld.tasks[1].relocs = [Reloc(16, 0, 0)]  # 16 + 8 > 20-byte payload
    with pytest.raises(FormatError, match="relocation at byte 16"):
        ld.to_bytes()
    ld = _sample()
    ld.tasks[0].relocs = [Reloc(0, 7, 0)]
    with pytest.raises(FormatError, match="relocation to region 7"):
        ld.to_bytes()


def test_region_image_patches_address_tables():
    ld = Loadable.from_bytes(_sample().to_bytes())
    assert ld.data_relocs == _sample().data_relocs
    bases = [0x10000, 0x20000, 0x30000, 0x40000]
    image = ld.region_image(0, bases)
    assert struct.unpack_from("<QQ", image, 1024) == (0x20000, 0x40008)
    assert image[:1024] == bytes(ld.regions[0].content[:1024])
    assert ld.region_image(1, bases) == b""  # activations: no contents
    bad = _sample()
    bad.data_relocs = [DataReloc(1, 0, 0, 0)]
    with pytest.raises(FormatError, match="region 1, which has no contents"):
        bad.to_bytes()
    bad.data_relocs = [DataReloc(0, 1036, 0, 0)]
    with pytest.raises(FormatError, match="byte 1036 outside"):
        bad.to_bytes()


def test_host_steps_round_trip_and_split_the_tasks_into_partitions():
    from libnpu.loadable import HostStep
    src = _sample()
    src.host_steps = [HostStep("rev", "tflite", "REVERSE_V2", b"TFL3-model", 1, [3], [3], 7, "no NPU operator"),
                      HostStep("neg", "onnx", "Neg", b"onnx-model", 1, [3], [4], 8, "not in the allow-list")]
    back = Loadable.from_bytes(src.to_bytes())
    assert back.host_steps == src.host_steps
    assert [(list(tasks), [s.name for s in steps]) for tasks, steps in back.partitions()] == \
        [([0], ["rev", "neg"]), ([1], [])]
    assert "host step after task 1: REVERSE_V2 (source op 7, tflite): no NPU operator" in back.summary()
    offsets = back.task_offsets()
    assert offsets[0] == 0 and offsets[1] == 40 and offsets[2] == 60
    src.host_steps[1].after_task = 0
    with pytest.raises(FormatError, match="host step 1 .* out of order"):
        src.validate()
    src.host_steps[1].after_task, src.host_steps[1].outputs = 1, [99]
    with pytest.raises(FormatError, match="tensor 99 does not exist"):
        src.validate()


def test_a_model_run_entirely_by_the_host_is_runnable():
    from libnpu.loadable import HostStep
    src = _sample()
    src.tasks = []
    src.host_steps = [HostStep("all", "tflite", "CUMSUM", b"m", 0, [0], [4])]
    src.check_runnable()
    assert [(list(tasks), len(steps)) for tasks, steps in src.partitions()] == [([], 1)]


def test_format_1_0_files_without_host_sections_still_load():
    data = bytearray(_sample().to_bytes())
    sections = _sections(bytes(data))
    kept = [s for s in sections if s[0] <= 12]             # the 1.0 sections
    table = struct.unpack_from("<Q", data, 32)[0]
    end = max(off + size for _, _, off, size in kept)
    entries = bytes(data[table:table + 32 * len(kept)])
    data[table + 32 * len(kept):table + 32 * len(sections)] = bytes(32 * (len(sections) - len(kept)))
    old = data[:end]
    struct.pack_into("<HH", old, 8, 1, 0)
    struct.pack_into("<I", old, 20, len(kept))
    struct.pack_into("<Q", old, 24, end)
    struct.pack_into("<I", old, 40, zlib.crc32(entries))
    _fix_header_crc(old)
    back = Loadable.from_bytes(bytes(old))
    assert back.host_steps == [] and len(back.tasks) == 2
