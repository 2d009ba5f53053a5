// The C side of ubiq's libfuse binding. Only FuseKit imports this module.
//
// FUSE_USE_VERSION 314 selects the libfuse 3.14 API (Debian bookworm's libfuse3 3.14.0; the
// 3.17+ calls on libfuse's main branch do not exist there). _FILE_OFFSET_BITS is deliberately
// not defined: off_t is already 64-bit on the 64-bit targets ubiq supports, and defining it here
// breaks the Swift build.
#ifndef CFUSE3_SHIM_H
#define CFUSE3_SHIM_H

#define FUSE_USE_VERSION 314
#include <pthread.h>
#include <stddef.h>  // NULL, used by FUSE_BUFVEC_INIT below
#include <fuse_lowlevel.h>

// fuse_reply_data() from a file descriptor: libfuse splices the byte range
// [offset, offset + size) of `fd` into /dev/fuse when FUSE_CAP_SPLICE_WRITE was negotiated,
// and otherwise preads it into a buffer. FUSE_BUFVEC_INIT is a macro, hence this helper.
// `fd` only needs to stay open until this call returns.
static inline int cfuse3_reply_fd(fuse_req_t req, int fd, off_t offset, size_t size) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = fd;
    buf.buf[0].pos = offset;
    // No FUSE_BUF_SPLICE_MOVE: the source pages belong to a cache file's page cache, which the
    // kernel cannot steal, so asking for a move only adds a failed attempt before the copy.
    return fuse_reply_data(req, &buf, (enum fuse_buf_copy_flags)0);
}

// Names the calling thread (shown by `top -H`, gdb, /proc/PID/task/TID/comm; at most 15
// bytes). prctl(PR_SET_NAME) names the calling thread itself, so no pthread_t crosses into C
// (a pthread_setname_np(pthread_self()) here crashed with a truncated thread handle).
#include <sys/prctl.h>
static inline void cfuse3_set_thread_name(const char *name) {
    prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

#endif
