/*
 * knem_io.h - the user/kernel ABI of /dev/knem, version 0x0d.
 *
 * This header is the single source of truth for the interface between
 * knem-rs and its clients.  It is a source-level drop-in for the header of
 * the original KNEM project: MPI libraries configured with --with-knem
 * compile against it unchanged.  It builds as C89, C99 and C++, in
 * userspace and in the Linux kernel.
 *
 * SPDX-License-Identifier: (GPL-2.0-only OR BSD-3-Clause)
 */

#ifndef KNEM_IO_H
#define KNEM_IO_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#define KNEM_U8 __u8
#define KNEM_U32 __u32
#define KNEM_U64 __u64
#else
#include <stdint.h>
#include <sys/ioctl.h>
#define KNEM_U8 uint8_t
#define KNEM_U32 uint32_t
#define KNEM_U64 uint64_t
#endif

#define KNEM_ABI_VERSION 0x0000000dU

#define KNEM_DEVICE_NAME "knem"
#define KNEM_DEVICE_FILENAME "/dev/" KNEM_DEVICE_NAME

/* Offset to pass to mmap() to map the status array of a file descriptor. */
#define KNEM_STATUS_ARRAY_FILE_OFFSET 0

typedef KNEM_U64 knem_cookie_t;
typedef KNEM_U8 knem_status_t;

/* Values found in a status slot or in current_status. */
enum knem_status_e {
	KNEM_STATUS_PENDING = 0,
	KNEM_STATUS_SUCCESS = 1,
	KNEM_STATUS_FAILED = 2
};

/* Bits of knem_cmd_info.features. */
#define KNEM_FEATURE_DMA (1U << 0)
/*
 * knem-rs extensions announce themselves with feature bits from 1 << 8
 * upward; none is defined in this version.
 */

/* Request flags (knem_flags). */
#define KNEM_FLAG_DMA (1U << 0)
#define KNEM_FLAG_ASYNCDMACOMPLETE (1U << 1)
#define KNEM_FLAG_DMATHREAD (1U << 2)
#define KNEM_FLAG_MEMCPYTHREAD (1U << 3)
#define KNEM_FLAG_PINLOCAL (1U << 4)
#define KNEM_FLAG_SINGLEUSE (1U << 5)
#define KNEM_FLAG_NOTIFY_FD (1U << 6)
#define KNEM_FLAG_ANY_USER_ACCESS (1U << 7)

#define KNEM_FLAG_ANY_THREAD_MASK (KNEM_FLAG_DMATHREAD | KNEM_FLAG_MEMCPYTHREAD)
#define KNEM_FLAG_ANY_ASYNC_MASK \
	(KNEM_FLAG_ANY_THREAD_MASK | KNEM_FLAG_ASYNCDMACOMPLETE)
#define KNEM_FLAG_ANY_DMA_MASK \
	(KNEM_FLAG_DMA | KNEM_FLAG_ASYNCDMACOMPLETE | KNEM_FLAG_DMATHREAD)
/* Flags accepted by CREATE_REGION and INIT_SEND. */
#define KNEM_FLAG_ANY_CREATE_MASK \
	(KNEM_FLAG_SINGLEUSE | KNEM_FLAG_ANY_USER_ACCESS)
/* Flags accepted by the copy commands. */
#define KNEM_FLAG_ANY_COPY_MASK                                        \
	(KNEM_FLAG_DMA | KNEM_FLAG_ASYNCDMACOMPLETE | KNEM_FLAG_DMATHREAD | \
	 KNEM_FLAG_MEMCPYTHREAD | KNEM_FLAG_PINLOCAL | KNEM_FLAG_NOTIFY_FD)

typedef KNEM_U32 knem_flags;

/* Flags of knem_cmd_bind_offload.flags. */
#define KNEM_BIND_FLAG_CUSTOM (1U << 0)
#define KNEM_BIND_FLAG_CURRENT (1U << 1)
#define KNEM_BIND_FLAG_CURRENT_REVERSED (1U << 2)

typedef KNEM_U32 knem_bind_flags;

struct knem_cmd_info {
	KNEM_U32 abi;           /* out: KNEM_ABI_VERSION */
	KNEM_U32 features;      /* out: KNEM_FEATURE_* */
	KNEM_U32 ignored_flags; /* out: flags accepted but not honoured */
	KNEM_U32 forced_flags;  /* out: flags always applied */
};

struct knem_cmd_bind_offload {
	knem_bind_flags flags;
	KNEM_U32 mask_len;      /* bytes at mask_ptr (CUSTOM only) */
	KNEM_U64 mask_ptr;      /* user pointer to a cpumask (CUSTOM only) */
};

struct knem_cmd_param_iovec {
	KNEM_U64 base;
	KNEM_U64 len;
};

/* Legacy: declare a read-only single-use region. */
struct knem_cmd_init_send_param {
	KNEM_U64 send_iovec_array;
	KNEM_U32 send_iovec_nr;
	knem_flags flags;
	knem_cookie_t send_cookie; /* out */
};

struct knem_cmd_create_region {
	KNEM_U64 iovec_array;
	KNEM_U32 iovec_nr;
	knem_flags flags;
	KNEM_U32 protection;    /* PROT_READ | PROT_WRITE */
	KNEM_U32 pad;
	knem_cookie_t cookie;   /* out */
};

/* Legacy: asynchronous inline read of a region at offset 0. */
struct knem_cmd_init_async_recv_param {
	KNEM_U64 recv_iovec_array;
	KNEM_U32 recv_iovec_nr;
	KNEM_U32 status_index;
	knem_cookie_t send_cookie;
	knem_flags flags;
	KNEM_U32 pad;
};

/* Legacy: synchronous inline read of a region at offset 0. */
struct knem_cmd_sync_recv_param {
	KNEM_U64 recv_iovec_array;
	KNEM_U32 recv_iovec_nr;
	KNEM_U32 status;        /* out */
	knem_cookie_t send_cookie;
	knem_flags flags;
	KNEM_U32 pad;
};

/* Copy between two declared regions. */
struct knem_cmd_copy {
	knem_cookie_t src_cookie;
	KNEM_U64 src_offset;
	knem_cookie_t dst_cookie;
	KNEM_U64 dst_offset;
	knem_flags flags;
	KNEM_U32 current_status;     /* out */
	KNEM_U32 async_status_index;
	KNEM_U32 pad;
};

struct knem_cmd_copy_bounded {
	knem_cookie_t src_cookie;
	KNEM_U64 src_offset;
	knem_cookie_t dst_cookie;
	KNEM_U64 dst_offset;
	KNEM_U64 length;
	knem_flags flags;
	KNEM_U32 current_status;     /* out */
	KNEM_U32 async_status_index;
	KNEM_U32 pad;
};

/* Copy between the caller's iovecs and a declared region. */
struct knem_cmd_inline_copy {
	KNEM_U64 local_iovec_array;
	KNEM_U32 local_iovec_nr;
	KNEM_U32 write;              /* 0: region -> local, 1: local -> region */
	knem_cookie_t remote_cookie;
	KNEM_U64 remote_offset;
	knem_flags flags;
	KNEM_U32 current_status;     /* out */
	KNEM_U32 async_status_index;
	KNEM_U32 pad;
};

struct knem_cmd_inline_copy_bounded {
	KNEM_U64 local_iovec_array;
	KNEM_U32 local_iovec_nr;
	KNEM_U32 write;
	knem_cookie_t remote_cookie;
	KNEM_U64 remote_offset;
	KNEM_U64 length;
	knem_flags flags;
	KNEM_U32 current_status;     /* out */
	KNEM_U32 async_status_index;
	KNEM_U32 pad;
};

#define KNEM_CMD_MAGIC 'K'

/*
 * The directions below are KNEM's historical encoding and part of the
 * binary ABI: GET_INFO is _IOW although the driver fills it in, and the
 * copy commands are _IOR although they return current_status.
 */
#define KNEM_CMD_GET_INFO _IOW(KNEM_CMD_MAGIC, 0x10, struct knem_cmd_info)
#define KNEM_CMD_BIND_OFFLOAD \
	_IOR(KNEM_CMD_MAGIC, 0x11, struct knem_cmd_bind_offload)
#define KNEM_CMD_INIT_SEND \
	_IOWR(KNEM_CMD_MAGIC, 0x20, struct knem_cmd_init_send_param)
#define KNEM_CMD_CREATE_REGION \
	_IOWR(KNEM_CMD_MAGIC, 0x21, struct knem_cmd_create_region)
#define KNEM_CMD_DESTROY_REGION _IOR(KNEM_CMD_MAGIC, 0x22, knem_cookie_t)
#define KNEM_CMD_INIT_ASYNC_RECV \
	_IOR(KNEM_CMD_MAGIC, 0x30, struct knem_cmd_init_async_recv_param)
#define KNEM_CMD_SYNC_RECV \
	_IOR(KNEM_CMD_MAGIC, 0x31, struct knem_cmd_sync_recv_param)
#define KNEM_CMD_COPY _IOR(KNEM_CMD_MAGIC, 0x32, struct knem_cmd_copy)
#define KNEM_CMD_INLINE_COPY \
	_IOR(KNEM_CMD_MAGIC, 0x33, struct knem_cmd_inline_copy)
#define KNEM_CMD_COPY_BOUNDED \
	_IOR(KNEM_CMD_MAGIC, 0x34, struct knem_cmd_copy_bounded)
#define KNEM_CMD_INLINE_COPY_BOUNDED \
	_IOR(KNEM_CMD_MAGIC, 0x35, struct knem_cmd_inline_copy_bounded)

#undef KNEM_U8
#undef KNEM_U32
#undef KNEM_U64

#endif /* KNEM_IO_H */
