/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/*
 * knem_abi_facts.h - the binary facts of KNEM ABI 0x0d (SPEC section 3).
 *
 * A list, not a header with a guard: the includer defines
 * KNEM_ABI_FACT(name, expr) to turn each fact into a compile-time check
 * (static_assert in the module, a negative array size in tests/abi, which
 * compiles the same list as C89, C99 and C++ against the userspace side of
 * include/knem_io.h).  Every number here was written from the
 * specification, not derived from the header it checks.
 *
 * Needs <stddef.h> (offsetof) and knem_io.h.
 */

#define KNEM_ABI_SIZE(s, size) KNEM_ABI_FACT(size_##s, sizeof(struct knem_cmd_##s) == (size))
#define KNEM_ABI_OFFSET(s, f, off) \
	KNEM_ABI_FACT(offset_##s##_##f, offsetof(struct knem_cmd_##s, f) == (off))

KNEM_ABI_FACT(abi_version, KNEM_ABI_VERSION == 0x0d)
KNEM_ABI_FACT(cmd_magic, KNEM_CMD_MAGIC == 'K')
KNEM_ABI_FACT(status_array_offset, KNEM_STATUS_ARRAY_FILE_OFFSET == 0)
KNEM_ABI_FACT(device_filename, sizeof(KNEM_DEVICE_FILENAME) == sizeof("/dev/knem"))

KNEM_ABI_FACT(size_cookie, sizeof(knem_cookie_t) == 8)
KNEM_ABI_FACT(size_status, sizeof(knem_status_t) == 1)
KNEM_ABI_FACT(size_flags, sizeof(knem_flags) == 4)
KNEM_ABI_FACT(size_bind_flags, sizeof(knem_bind_flags) == 4)

KNEM_ABI_FACT(status_pending, KNEM_STATUS_PENDING == 0)
KNEM_ABI_FACT(status_success, KNEM_STATUS_SUCCESS == 1)
KNEM_ABI_FACT(status_failed, KNEM_STATUS_FAILED == 2)

KNEM_ABI_FACT(feature_dma, KNEM_FEATURE_DMA == 0x1)

KNEM_ABI_FACT(flag_dma, KNEM_FLAG_DMA == 0x1)
KNEM_ABI_FACT(flag_asyncdmacomplete, KNEM_FLAG_ASYNCDMACOMPLETE == 0x2)
KNEM_ABI_FACT(flag_dmathread, KNEM_FLAG_DMATHREAD == 0x4)
KNEM_ABI_FACT(flag_memcpythread, KNEM_FLAG_MEMCPYTHREAD == 0x8)
KNEM_ABI_FACT(flag_pinlocal, KNEM_FLAG_PINLOCAL == 0x10)
KNEM_ABI_FACT(flag_singleuse, KNEM_FLAG_SINGLEUSE == 0x20)
KNEM_ABI_FACT(flag_notify_fd, KNEM_FLAG_NOTIFY_FD == 0x40)
KNEM_ABI_FACT(flag_any_user_access, KNEM_FLAG_ANY_USER_ACCESS == 0x80)
KNEM_ABI_FACT(mask_any_thread, KNEM_FLAG_ANY_THREAD_MASK == 0x0c)
KNEM_ABI_FACT(mask_any_async, KNEM_FLAG_ANY_ASYNC_MASK == 0x0e)
KNEM_ABI_FACT(mask_any_dma, KNEM_FLAG_ANY_DMA_MASK == 0x07)
KNEM_ABI_FACT(mask_any_create, KNEM_FLAG_ANY_CREATE_MASK == 0xa0)
KNEM_ABI_FACT(mask_any_copy, KNEM_FLAG_ANY_COPY_MASK == 0x5f)

KNEM_ABI_FACT(bind_custom, KNEM_BIND_FLAG_CUSTOM == 0x1)
KNEM_ABI_FACT(bind_current, KNEM_BIND_FLAG_CURRENT == 0x2)
KNEM_ABI_FACT(bind_current_reversed, KNEM_BIND_FLAG_CURRENT_REVERSED == 0x4)

/* The x86-64 encodings, direction and size included. */
KNEM_ABI_FACT(cmd_get_info, KNEM_CMD_GET_INFO == 0x40104b10UL)
KNEM_ABI_FACT(cmd_bind_offload, KNEM_CMD_BIND_OFFLOAD == 0x80104b11UL)
KNEM_ABI_FACT(cmd_init_send, KNEM_CMD_INIT_SEND == 0xc0184b20UL)
KNEM_ABI_FACT(cmd_create_region, KNEM_CMD_CREATE_REGION == 0xc0204b21UL)
KNEM_ABI_FACT(cmd_destroy_region, KNEM_CMD_DESTROY_REGION == 0x80084b22UL)
KNEM_ABI_FACT(cmd_init_async_recv, KNEM_CMD_INIT_ASYNC_RECV == 0x80204b30UL)
KNEM_ABI_FACT(cmd_sync_recv, KNEM_CMD_SYNC_RECV == 0x80204b31UL)
KNEM_ABI_FACT(cmd_copy, KNEM_CMD_COPY == 0x80304b32UL)
KNEM_ABI_FACT(cmd_inline_copy, KNEM_CMD_INLINE_COPY == 0x80304b33UL)
KNEM_ABI_FACT(cmd_copy_bounded, KNEM_CMD_COPY_BOUNDED == 0x80384b34UL)
KNEM_ABI_FACT(cmd_inline_copy_bounded, KNEM_CMD_INLINE_COPY_BOUNDED == 0x80384b35UL)

KNEM_ABI_SIZE(info, 16)
KNEM_ABI_OFFSET(info, abi, 0)
KNEM_ABI_OFFSET(info, features, 4)
KNEM_ABI_OFFSET(info, ignored_flags, 8)
KNEM_ABI_OFFSET(info, forced_flags, 12)

KNEM_ABI_SIZE(bind_offload, 16)
KNEM_ABI_OFFSET(bind_offload, flags, 0)
KNEM_ABI_OFFSET(bind_offload, mask_len, 4)
KNEM_ABI_OFFSET(bind_offload, mask_ptr, 8)

KNEM_ABI_SIZE(param_iovec, 16)
KNEM_ABI_OFFSET(param_iovec, base, 0)
KNEM_ABI_OFFSET(param_iovec, len, 8)

KNEM_ABI_SIZE(init_send_param, 24)
KNEM_ABI_OFFSET(init_send_param, send_iovec_array, 0)
KNEM_ABI_OFFSET(init_send_param, send_iovec_nr, 8)
KNEM_ABI_OFFSET(init_send_param, flags, 12)
KNEM_ABI_OFFSET(init_send_param, send_cookie, 16)

KNEM_ABI_SIZE(create_region, 32)
KNEM_ABI_OFFSET(create_region, iovec_array, 0)
KNEM_ABI_OFFSET(create_region, iovec_nr, 8)
KNEM_ABI_OFFSET(create_region, flags, 12)
KNEM_ABI_OFFSET(create_region, protection, 16)
KNEM_ABI_OFFSET(create_region, pad, 20)
KNEM_ABI_OFFSET(create_region, cookie, 24)

KNEM_ABI_SIZE(init_async_recv_param, 32)
KNEM_ABI_OFFSET(init_async_recv_param, recv_iovec_array, 0)
KNEM_ABI_OFFSET(init_async_recv_param, recv_iovec_nr, 8)
KNEM_ABI_OFFSET(init_async_recv_param, status_index, 12)
KNEM_ABI_OFFSET(init_async_recv_param, send_cookie, 16)
KNEM_ABI_OFFSET(init_async_recv_param, flags, 24)
KNEM_ABI_OFFSET(init_async_recv_param, pad, 28)

KNEM_ABI_SIZE(sync_recv_param, 32)
KNEM_ABI_OFFSET(sync_recv_param, recv_iovec_array, 0)
KNEM_ABI_OFFSET(sync_recv_param, recv_iovec_nr, 8)
KNEM_ABI_OFFSET(sync_recv_param, status, 12)
KNEM_ABI_OFFSET(sync_recv_param, send_cookie, 16)
KNEM_ABI_OFFSET(sync_recv_param, flags, 24)
KNEM_ABI_OFFSET(sync_recv_param, pad, 28)

KNEM_ABI_SIZE(copy, 48)
KNEM_ABI_OFFSET(copy, src_cookie, 0)
KNEM_ABI_OFFSET(copy, src_offset, 8)
KNEM_ABI_OFFSET(copy, dst_cookie, 16)
KNEM_ABI_OFFSET(copy, dst_offset, 24)
KNEM_ABI_OFFSET(copy, flags, 32)
KNEM_ABI_OFFSET(copy, current_status, 36)
KNEM_ABI_OFFSET(copy, async_status_index, 40)
KNEM_ABI_OFFSET(copy, pad, 44)

KNEM_ABI_SIZE(copy_bounded, 56)
KNEM_ABI_OFFSET(copy_bounded, src_cookie, 0)
KNEM_ABI_OFFSET(copy_bounded, src_offset, 8)
KNEM_ABI_OFFSET(copy_bounded, dst_cookie, 16)
KNEM_ABI_OFFSET(copy_bounded, dst_offset, 24)
KNEM_ABI_OFFSET(copy_bounded, length, 32)
KNEM_ABI_OFFSET(copy_bounded, flags, 40)
KNEM_ABI_OFFSET(copy_bounded, current_status, 44)
KNEM_ABI_OFFSET(copy_bounded, async_status_index, 48)
KNEM_ABI_OFFSET(copy_bounded, pad, 52)

KNEM_ABI_SIZE(inline_copy, 48)
KNEM_ABI_OFFSET(inline_copy, local_iovec_array, 0)
KNEM_ABI_OFFSET(inline_copy, local_iovec_nr, 8)
KNEM_ABI_OFFSET(inline_copy, write, 12)
KNEM_ABI_OFFSET(inline_copy, remote_cookie, 16)
KNEM_ABI_OFFSET(inline_copy, remote_offset, 24)
KNEM_ABI_OFFSET(inline_copy, flags, 32)
KNEM_ABI_OFFSET(inline_copy, current_status, 36)
KNEM_ABI_OFFSET(inline_copy, async_status_index, 40)
KNEM_ABI_OFFSET(inline_copy, pad, 44)

KNEM_ABI_SIZE(inline_copy_bounded, 56)
KNEM_ABI_OFFSET(inline_copy_bounded, local_iovec_array, 0)
KNEM_ABI_OFFSET(inline_copy_bounded, local_iovec_nr, 8)
KNEM_ABI_OFFSET(inline_copy_bounded, write, 12)
KNEM_ABI_OFFSET(inline_copy_bounded, remote_cookie, 16)
KNEM_ABI_OFFSET(inline_copy_bounded, remote_offset, 24)
KNEM_ABI_OFFSET(inline_copy_bounded, length, 32)
KNEM_ABI_OFFSET(inline_copy_bounded, flags, 40)
KNEM_ABI_OFFSET(inline_copy_bounded, current_status, 44)
KNEM_ABI_OFFSET(inline_copy_bounded, async_status_index, 48)
KNEM_ABI_OFFSET(inline_copy_bounded, pad, 52)

#undef KNEM_ABI_SIZE
#undef KNEM_ABI_OFFSET
