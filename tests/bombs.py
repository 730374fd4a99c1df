"""Decompression bombs in every upload format, written without ever holding their decoded
size in memory (streamed through zlib), for tests/test_readers_budget.py and
bench/bench_upload_rss.py --bombs."""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from pathlib import Path

import numpy as np

CHUNK = 1 << 22


def nifti_gz(path: Path, shape: tuple[int, ...], dtype: str = "int16") -> Path:
    """A .nii.gz of zeros with the given shape, its data streamed into gzip."""
    import nibabel as nib

    header = nib.Nifti1Header()
    header.set_data_shape(shape)
    header.set_data_dtype(np.dtype(dtype))
    header.set_zooms((1.0,) * len(shape))
    header["vox_offset"] = 352
    header.set_qform(np.eye(4), code=1)
    header.set_sform(np.eye(4), code=1)
    total = int(np.prod(shape)) * np.dtype(dtype).itemsize
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(header.binaryblock + b"\0" * 4)  # 348 + the empty extension flag
        zeros = b"\0" * CHUNK
        while total > 0:
            handle.write(zeros[: min(total, CHUNK)])
            total -= CHUNK
    return path


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(path: Path, width: int, height: int) -> Path:
    """A greyscale PNG of zeros: every row is streamed through zlib (a real, complete image)."""
    compressor = zlib.compressobj(9)
    row = b"\0" * (width + 1)  # filter byte + pixels
    parts = [compressor.compress(row) for _ in range(height)]
    idat = b"".join(parts) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
    path.write_bytes(body + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b""))
    return path


def jpeg(path: Path, width: int, height: int) -> Path:
    """A JPEG whose frame header declares width x height (a small real JPEG, its SOF patched):
    the declared size is all a reader may trust before decoding."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (16, 16)).save(buffer, format="JPEG")
    data = bytearray(buffer.getvalue())
    marker = data.find(b"\xff\xc0")
    data[marker + 5 : marker + 9] = struct.pack(">HH", height, width)
    path.write_bytes(bytes(data))
    return path


def deflated_dicom(path: Path, rows: int, columns: int, frames: int = 1) -> Path:
    """A Deflated Explicit VR Little Endian DICOM (PS3.5 A.5) of zero pixels, its dataset
    streamed through raw deflate."""
    import pydicom
    from pydicom import uid
    from pydicom.dataset import FileMetaDataset
    from pydicom.filebase import DicomBytesIO
    from pydicom.filewriter import write_dataset, write_file_meta_info

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = uid.CTImageStorage
    meta.MediaStorageSOPInstanceUID = uid.generate_uid()
    meta.TransferSyntaxUID = uid.DeflatedExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = (
        meta.MediaStorageSOPClassUID,
        meta.MediaStorageSOPInstanceUID,
    )
    ds.Modality, ds.Rows, ds.Columns = "CT", rows, columns
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    if frames > 1:
        ds.NumberOfFrames = frames
    body = DicomBytesIO()
    body.is_little_endian, body.is_implicit_VR = True, False
    write_dataset(body, ds)
    length = rows * columns * 2 * frames
    pixel_header = struct.pack("<HH2sHI", 0x7FE0, 0x0010, b"OW", 0, length)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    out = io.BytesIO()
    out.write(b"\0" * 128 + b"DICM")
    meta_io = DicomBytesIO()
    meta_io.is_little_endian, meta_io.is_implicit_VR = True, False
    write_file_meta_info(meta_io, meta, enforce_standard=True)
    out.write(meta_io.getvalue())
    out.write(compressor.compress(body.getvalue() + pixel_header))
    zeros = b"\0" * CHUNK
    while length > 0:
        out.write(compressor.compress(zeros[: min(length, CHUNK)]))
        length -= CHUNK
    out.write(compressor.flush())
    path.write_bytes(out.getvalue())
    return path
