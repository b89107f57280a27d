//! The MIT-SHM capture segment: the workspace's one `unsafe` exception.
//!
//! A memfd is mapped into this process and handed to the X server
//! (`ShmAttachFd`, MIT-SHM >= 1.2); `ShmGetImage` then writes the pixels
//! straight into our mapping, with no copy through the socket. Mapping a
//! file is `unsafe` in Rust because another process could change the
//! file under a live reference; the invariants that make it sound here are
//! written on the block.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;

use memmap2::MmapMut;
use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
use x11rb::connection::Connection;
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{ImageFormat, Window};
use x11rb::rust_connection::RustConnection;

use super::{conn_err, reply_err};
use crate::driver::DriverError;

/// One shared segment, attached to the server.
#[derive(Debug)]
pub struct Segment {
    seg: shm::Seg,
    map: MmapMut,
}

impl Segment {
    /// Creates a segment of `len` bytes and attaches it to the server.
    pub fn new(conn: &RustConnection, len: usize) -> Result<Segment, DriverError> {
        let fd: OwnedFd = memfd_create("sandtopd-capture", MemfdFlags::CLOEXEC)
            .map_err(|e| DriverError::Protocol(format!("memfd_create: {e}")))?;
        ftruncate(&fd, len as u64)
            .map_err(|e| DriverError::Protocol(format!("ftruncate of the capture segment: {e}")))?;
        let file = std::fs::File::from(fd);
        // SAFETY: the memfd was created above and is shared with nobody
        // but the X server, which only writes into it while it serves a
        // ShmGetImage for this segment. `image` takes `&mut self`, waits
        // for that request's reply before handing out a slice, and the
        // slice's lifetime ends before the next request can be issued, so
        // no Rust reference to the bytes is alive while the server writes.
        // The file is never truncated after this point.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
            .map_err(|e| DriverError::Protocol(format!("mmap of the capture segment: {e}")))?;
        let seg = conn
            .generate_id()
            .map_err(|e| DriverError::Protocol(e.to_string()))?;
        conn.shm_attach_fd(seg, OwnedFd::from(file), false)
            .map_err(conn_err)?
            .check()
            .map_err(reply_err)?;
        Ok(Segment { seg, map })
    }

    /// Bytes the segment holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Captures `width`x`height` at (`x`, `y`) of `root` as 32-bit pixels,
    /// packed rows (`width * 4` bytes apart).
    pub fn image(
        &mut self,
        conn: &RustConnection,
        root: Window,
        (x, y, width, height): (i16, i16, u16, u16),
    ) -> Result<&[u8], DriverError> {
        let need = usize::from(width) * usize::from(height) * 4;
        if need > self.map.len() {
            return Err(DriverError::Protocol(format!(
                "a {width}x{height} capture does not fit the {}-byte segment",
                self.map.len()
            )));
        }
        conn.shm_get_image(
            root,
            x,
            y,
            width,
            height,
            !0,
            ImageFormat::Z_PIXMAP.into(),
            self.seg,
            0,
        )
        .map_err(conn_err)?
        .reply()
        .map_err(reply_err)?;
        Ok(&self.map[..need])
    }

    /// Detaches the segment from the server (the mapping goes with `self`).
    pub fn detach(self, conn: &RustConnection) {
        let _ = conn.shm_detach(self.seg);
        let _ = conn.flush();
    }
}
