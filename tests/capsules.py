"""DLPack capsules made by hand, for tests: any data pointer, shape, strides,
byte offset, dtype, device, flags and version, with a deleter that counts
its calls, and memory fenced by pages no one may touch.

A ``Producer`` is an object whose only protocol is ``__dlpack__``: each call
hands over a new capsule of the tensor it describes.  Its capsule
destructor calls the deleter when no consumer took the capsule, as numpy's
and torch's do, so ``deleted`` counts 1 per capsule whoever ends it.
"""

from __future__ import annotations

import ctypes
import mmap
import weakref

PAGE = mmap.PAGESIZE
PROT_NONE = 0


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Versioned(ctypes.Structure):
    """DLManagedTensorVersioned (DLPack 1.0 and later)."""


class Legacy(ctypes.Structure):
    """DLManagedTensor (before DLPack 1.0: no version, no flags)."""


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
Versioned._fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                      ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                      ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]
Legacy._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                   ("deleter", DELETER)]

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
capsule_name = ctypes.pythonapi.PyCapsule_GetName
capsule_name.restype = ctypes.c_char_p
capsule_name.argtypes = [ctypes.py_object]
capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
capsule_set_name.restype = ctypes.c_int
capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]

#: The producers whose tensors are alive, by the address of their managed
#: tensor: the deleter and the destructor below are made once and live as
#: long as the process, so a capsule that outlives its producer never calls
#: freed code.
_live: weakref.WeakValueDictionary[int, Producer] = weakref.WeakValueDictionary()


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(managed):
    p = _live.get(managed)
    if p is not None:
        p.deleted += 1


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destructor(capsule):
    # Not taken by a consumer (the name is still the producer's): ours to
    # end, as numpy's and torch's capsule destructors do.  Python code run
    # from C: with an exception pending it would fail at its first call
    # (ctypes takes the pending exception for its own error, prints it as
    # unraisable and drops it, and the code that was propagating it then
    # raises SystemError).  So a capsule dies where none is pending: in its
    # consumer (which sets a pending one aside first) or in
    # Producer.__del__, never with a Producer's dict while one propagates.
    for name in (b"dltensor_versioned", b"dltensor"):
        if _capsule_is_valid(capsule, name):
            _deleter(_capsule_pointer(capsule, name))


class Producer:
    """A tensor behind nothing but ``__dlpack__``, described field by field.

    data: an address (int; 0 for NULL) or a ctypes object whose address is
    taken (and kept alive).  strides None: no strides array (C order).
    version None: an unversioned (pre-1.0) capsule, else (major, minor).
    ndim: the field as given (default: the shape's length); deleter False: a
    NULL deleter.  deleted counts the deleter's calls, exports the capsules
    handed over; capsule is the last one where keep is set.
    """

    def __init__(self, data, shape, strides=None, *, code=1, bits=8, lanes=1, device=1,
                 device_id=0, byte_offset=0, version=(1, 0), flags=0, ndim=None,
                 deleter=True, keep=False):
        self.keep = data
        address = data if isinstance(data, int) else ctypes.addressof(data)
        self.shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides = None if strides is None else (
            (ctypes.c_int64 * max(len(strides), 1))(*strides))
        self.deleted = 0
        self.exports = 0
        self.capsule = None
        self.keep_capsule = keep
        t = DLTensor(address or None, device, device_id, len(shape) if ndim is None else ndim,
                     code, bits, lanes, self.shape, self.strides, byte_offset)
        fn = _deleter if deleter else DELETER()
        if version is None:
            self.m = Legacy(t, None, fn)
            self.name = b"dltensor"
        else:
            self.m = Versioned(version[0], version[1], None, fn, flags, t)
            self.name = b"dltensor_versioned"
        _live[ctypes.addressof(self.m)] = self

    def __del__(self):
        # CPython sets a pending exception aside around __del__ (a
        # Producer made for one call dies as that call's error propagates),
        # so the capsule kept ends here, with none pending.  Ended by hand
        # where never taken: when the collector ends a Producer, it has
        # cleared the weak reference its destructor would find it by.
        capsule, self.capsule = self.capsule, None
        if capsule is not None and capsule_name(capsule) == self.name:
            capsule_set_name(capsule, b"used_" + self.name)
            self.deleted += 1

    def __dlpack__(self, **kw):
        self.exports += 1
        capsule = _new_capsule(ctypes.addressof(self.m), self.name,
                               ctypes.cast(_destructor, ctypes.c_void_p))
        if self.keep_capsule:
            self.capsule = capsule
        return capsule

    def __dlpack_device__(self):
        return (self.m.dl_tensor.device_type, self.m.dl_tensor.device_id)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class Fenced:
    """n bytes of private memory with a page of PROT_NONE before and after:
    a touch there faults at once.  The n bytes end at the fence after them
    (at_end) or start at the one before; ``address`` is their first byte.
    The rest of their pages is readable and writable: guard bytes."""

    def __init__(self, n: int, at_end: bool = True):
        self.n = n
        self.inner = -(-max(n, 1) // PAGE) * PAGE
        self.size = self.inner + 2 * PAGE
        base = _libc.mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        self.base = base
        for at in (base, base + PAGE + self.inner):
            if _libc.mprotect(at, PAGE, PROT_NONE) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")
        self.address = base + PAGE + (self.inner - n if at_end else 0)
        self.first = base + PAGE

    def bytes(self) -> bytes:
        """Every accessible byte, from the first page's start."""
        return ctypes.string_at(self.first, self.inner)

    def fill(self, value: int) -> None:
        ctypes.memset(self.first, value, self.inner)

    def write(self, data: bytes) -> None:
        """Every accessible byte, from the first page's start."""
        ctypes.memmove(self.first, data, min(len(data), self.inner))

    def close(self) -> None:
        if self.base:
            _libc.munmap(self.base, self.size)
            self.base = 0


class Taken:
    """A capsule taken as a consumer takes it (renamed used_*, so its
    destructor leaves the tensor alone): ``m`` is its managed tensor, read
    in place; ``delete(in_thread=False)`` calls its deleter once (ctypes lets
    the GIL go for the call, as a consumer freeing a tensor may)."""

    def __init__(self, capsule):
        name = capsule_name(capsule)
        if name not in (b"dltensor_versioned", b"dltensor"):
            raise ValueError("not a DLPack capsule a consumer may take: %r" % (name,))
        self.versioned = name == b"dltensor_versioned"
        address = _capsule_pointer(ctypes.c_void_p(id(capsule)), name)
        self.m = (Versioned if self.versioned else Legacy).from_address(address)
        self.address = address
        if capsule_set_name(capsule, b"used_" + name) != 0:
            raise RuntimeError("PyCapsule_SetName failed")
        self.deleted = False

    @property
    def tensor(self) -> DLTensor:
        return self.m.dl_tensor

    def shape(self) -> list[int]:
        return [self.tensor.shape[i] for i in range(self.tensor.ndim)]

    def strides(self) -> list[int] | None:
        if not self.tensor.strides:
            return None
        return [self.tensor.strides[i] for i in range(self.tensor.ndim)]

    def delete(self, in_thread: bool = False) -> None:
        if self.deleted:
            raise RuntimeError("a consumer calls the deleter once")
        self.deleted = True
        call = ctypes.cast(self.m.deleter, ctypes.c_void_p).value
        if not call:
            return
        fn = DELETER(call)
        if in_thread:
            import threading

            t = threading.Thread(target=fn, args=(self.address,))
            t.start()
            t.join()
        else:
            fn(self.address)
