"""Numbers and wire layouts of the NBD protocol (fixed newstyle, structured replies)."""

import struct

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
OPTION_REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
STRUCTURED_REPLY_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE = 1 << 0
FLAG_NO_ZEROES = 1 << 1

OPT_ABORT = 2
OPT_STARTTLS = 5
OPT_GO = 7
OPT_STRUCTURED_REPLY = 8
OPT_LIST_META_CONTEXT = 9
OPT_SET_META_CONTEXT = 10

REP_ACK = 1
REP_INFO = 3
REP_META_CONTEXT = 4
REP_FLAG_ERROR = 1 << 31
REP_ERRORS = {
    REP_FLAG_ERROR + 1: "unsupported",
    REP_FLAG_ERROR + 2: "refused by policy",
    REP_FLAG_ERROR + 3: "invalid",
    REP_FLAG_ERROR + 4: "not supported on this platform",
    REP_FLAG_ERROR + 5: "TLS required",
    REP_FLAG_ERROR + 6: "unknown export",
    REP_FLAG_ERROR + 7: "server shutting down",
    REP_FLAG_ERROR + 8: "block size required",
    REP_FLAG_ERROR + 9: "too big",
}
REP_ERR_UNSUP = REP_FLAG_ERROR + 1
REP_ERR_TLS_REQD = REP_FLAG_ERROR + 5
REP_ERR_UNKNOWN = REP_FLAG_ERROR + 6

INFO_EXPORT = 0
INFO_BLOCK_SIZE = 3

TFLAG_READ_ONLY = 1 << 1
TFLAG_SEND_FLUSH = 1 << 2
TFLAG_SEND_FUA = 1 << 3
TFLAG_SEND_TRIM = 1 << 5
TFLAG_SEND_WRITE_ZEROES = 1 << 6
TFLAG_SEND_FAST_ZERO = 1 << 11

CMD_READ = 0
CMD_WRITE = 1
CMD_DISC = 2
CMD_FLUSH = 3
CMD_TRIM = 4
CMD_WRITE_ZEROES = 6
CMD_BLOCK_STATUS = 7
COMMAND_NAMES = {
    CMD_READ: "read",
    CMD_WRITE: "write",
    CMD_DISC: "disconnect",
    CMD_FLUSH: "flush",
    CMD_TRIM: "trim",
    CMD_WRITE_ZEROES: "write-zeroes",
    CMD_BLOCK_STATUS: "block-status",
}

CMD_FLAG_FUA = 1 << 0
CMD_FLAG_NO_HOLE = 1 << 1
CMD_FLAG_FAST_ZERO = 1 << 4

REPLY_FLAG_DONE = 1 << 0
REPLY_TYPE_NONE = 0
REPLY_TYPE_OFFSET_DATA = 1
REPLY_TYPE_OFFSET_HOLE = 2
REPLY_TYPE_BLOCK_STATUS = 5
REPLY_TYPE_ERROR_BIT = 1 << 15

ERRNO_NAMES = {
    1: "EPERM",
    5: "EIO",
    12: "ENOMEM",
    22: "EINVAL",
    28: "ENOSPC",
    75: "EOVERFLOW",
    95: "ENOTSUP",
    108: "ESHUTDOWN",
}

STATE_HOLE = 1 << 0
STATE_ZERO = 1 << 1
STATE_DIRTY = 1 << 0

DEFAULT_PORT = 10809
DEFAULT_MAX_PAYLOAD = 32 << 20
MAX_MIN_BLOCK = 64 << 10
MAX_EXPORT_SIZE = (1 << 63) - 1
MAX_ERROR_MESSAGE = 4096

OPTION_HEADER = struct.Struct(">QII")
OPTION_REPLY = struct.Struct(">QIII")
REQUEST = struct.Struct(">IHHQQI")
SIMPLE_REPLY_REST = struct.Struct(">IQ")
STRUCTURED_REPLY_REST = struct.Struct(">HHQI")
MAGIC = struct.Struct(">I")
CHUNK_OFFSET = struct.Struct(">Q")
HOLE_CHUNK = struct.Struct(">QI")
STATUS_CONTEXT = struct.Struct(">I")
STATUS_DESCRIPTOR = struct.Struct(">II")
ERROR_CHUNK = struct.Struct(">IH")


def errno_name(code: int) -> str:
    """The name of an NBD error number, such as EIO."""
    return ERRNO_NAMES.get(code, f"error {code}")
