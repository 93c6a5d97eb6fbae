//! The agent downloads (`GET /v1/agent/binary`, `GET /v1/agent/package.deb`): anonymous, as
//! they must be (a host fetches them before it has a certificate), so bounded.
//!
//! - At most `enrollment.max_agent_downloads` of each at once ([`Downloads`]); past that the
//!   answer is 503 with `Retry-After`, which the bootstrap script's `curl --retry` honours. A
//!   download holds its slot until its last byte is taken, its connection goes, or
//!   [`SLOT_SECS`] pass: a client that stops reading cannot keep a slot for ever.
//! - The body is cut into [`CHUNK`]-byte slices of the one shared copy (nothing is copied),
//!   with its exact length, so `Content-Length` holds and the connection layer's pacing of
//!   anonymous answers applies.
//! - The binary is checked at start for debug sections ([`debug_sections`]): an unstripped
//!   release build is several times the size of a stripped one, and every enrolling host
//!   downloads it. The coordinator serves the file it is given byte for byte (its sha256 is
//!   what the bootstrap script pins, and what an operator compares with their build), so it
//!   warns, naming the size and the fix, rather than rewriting it.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::error::ApiError;
use crate::app::AgentBinary;

/// The default of `enrollment.max_agent_downloads`: a rack's worth of hosts enrolling at once
/// download at full speed, the rest retry a few seconds later.
pub const DEFAULT_MAX_DOWNLOADS: usize = 8;

/// The longest a download holds its slot: the bootstrap script's `curl --max-time` for a
/// fetch, after which it has given up on the download anyway.
pub const SLOT_SECS: u64 = 120;

/// The `Retry-After` of a refused download: a stripped agent takes a second or two on a
/// datacenter link, so a slot is likely free by then.
pub const RETRY_AFTER_SECS: u64 = 5;

/// Bytes handed to the connection per frame: large enough to cost little per frame, small
/// enough that the slot is released close to when the last byte actually leaves.
pub const CHUNK: usize = 256 << 10;

/// The concurrent downloads of one file.
#[derive(Debug, Clone)]
pub struct Downloads {
    slots: Arc<Semaphore>,
    limit: usize,
}

impl Downloads {
    /// At most `limit` at once.
    pub fn new(limit: usize) -> Downloads {
        Downloads { slots: Arc::new(Semaphore::new(limit)), limit }
    }

    /// Downloads holding a slot now.
    pub fn in_flight(&self) -> usize {
        self.limit - self.slots.available_permits()
    }

    /// The answer to a download of `bytes` as `content_type`: the bytes in a slot, or 503
    /// with `Retry-After` when every slot is taken. Needs a Tokio runtime (the slot's timer).
    pub fn answer(&self, bytes: &Bytes, content_type: &'static str) -> Response {
        let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() else {
            let mut busy = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "downloads_busy",
                format!(
                    "{} agent downloads are in progress, the most this coordinator serves at once; retry in {RETRY_AFTER_SECS} s",
                    self.limit
                ),
            )
            .into_response();
            busy.headers_mut().insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
            return busy;
        };
        let slot = Arc::new(Mutex::new(Some(permit)));
        // The timer holds the slot weakly: a finished download has dropped it already.
        let held = Arc::downgrade(&slot);
        // From now, not from when the timer task first runs.
        let until = tokio::time::Instant::now() + Duration::from_secs(SLOT_SECS);
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            if let Some(slot) = held.upgrade() {
                slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            }
        });
        let body = Download { rest: bytes.clone(), _slot: slot };
        ([(header::CONTENT_TYPE, content_type)], Body::new(body)).into_response()
    }
}

impl AgentBinary {
    /// `bytes` as served: hashed for the bootstrap script, at most `max_downloads` at once,
    /// its debug sections noted.
    pub fn new(bytes: Vec<u8>, max_downloads: usize) -> AgentBinary {
        use sha2::Digest as _;
        AgentBinary {
            sha256: hex::encode(sha2::Sha256::digest(&bytes)),
            debug: debug_sections(&bytes),
            bytes: bytes.into(),
            downloads: Downloads::new(max_downloads),
        }
    }
}

/// The warning for an agent binary at `path`, `size` bytes, that carries `debug`.
pub fn debug_warning(path: &std::path::Path, size: usize, debug: &DebugSections) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    format!(
        "agent_binary {} carries {} debug sections ({:.1} MiB of its {:.1} MiB) that every enrolling host downloads: \
         serve a stripped build (`strip --strip-debug`, or the drover-coordinator package's /usr/lib/drover/drover-agent)",
        path.display(),
        debug.count,
        mib(debug.bytes),
        mib(size as u64),
    )
}

/// A download's body: the bytes not sent yet, and the slot, released when it is dropped.
struct Download {
    rest: Bytes,
    _slot: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

impl HttpBody for Download {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            return Poll::Ready(None);
        }
        let piece = this.rest.split_to(this.rest.len().min(CHUNK));
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// What an ELF file carries in debug sections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugSections {
    /// How many (`.debug_*`, `.zdebug_*`, not loaded at run time).
    pub count: usize,
    /// Their bytes in the file.
    pub bytes: u64,
}

/// The debug sections of `file`, an ELF executable: `None` when it has none, or when it is
/// not an ELF file this reads (then there is nothing to say about it). Every read is bounds
/// checked: the file is the operator's, but a wrong path may name anything.
pub fn debug_sections(file: &[u8]) -> Option<DebugSections> {
    let elf = Elf::new(file)?;
    let (count, names) = elf.section_table()?;
    let mut found = DebugSections { count: 0, bytes: 0 };
    for index in 0..count {
        let section = elf.section(index)?;
        // SHT_NOBITS takes no room in the file; SHF_ALLOC sections are loaded (and a
        // `.debug_gdb_scripts` is one): neither is what `strip --strip-debug` removes.
        if section.kind == 8 || section.flags & 0x2 != 0 {
            continue;
        }
        let name = elf.name(&names, section.name)?;
        if name.starts_with(b".debug") || name.starts_with(b".zdebug") {
            found.count += 1;
            found.bytes = found.bytes.saturating_add(section.size);
        }
    }
    (found.count > 0).then_some(found)
}

/// An ELF file's header fields this reads.
struct Elf<'a> {
    file: &'a [u8],
    wide: bool,
    big_endian: bool,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    shstrndx: u64,
}

/// One section header's fields this reads.
struct Section {
    name: u64,
    kind: u64,
    flags: u64,
    offset: u64,
    size: u64,
    link: u64,
}

impl<'a> Elf<'a> {
    fn new(file: &'a [u8]) -> Option<Elf<'a>> {
        if !file.starts_with(b"\x7fELF") {
            return None;
        }
        let wide = match file.get(4)? {
            1 => false,
            2 => true,
            _ => return None,
        };
        let big_endian = match file.get(5)? {
            1 => false,
            2 => true,
            _ => return None,
        };
        let mut elf = Elf { file, wide, big_endian, shoff: 0, shentsize: 0, shnum: 0, shstrndx: 0 };
        let (shoff, fields) = if wide { (elf.word(0x28, 8)?, 0x3A) } else { (elf.word(0x20, 4)?, 0x2E) };
        elf.shoff = shoff;
        elf.shentsize = elf.word(fields, 2)?;
        elf.shnum = elf.word(fields + 2, 2)?;
        elf.shstrndx = elf.word(fields + 4, 2)?;
        if elf.shoff == 0 || elf.shentsize < if wide { 64 } else { 40 } {
            return None;
        }
        Some(elf)
    }

    /// The unsigned `len`-byte field at `at`, in the file's byte order.
    fn word(&self, at: u64, len: usize) -> Option<u64> {
        let start = usize::try_from(at).ok()?;
        let bytes = self.file.get(start..start.checked_add(len)?)?;
        let fold = |acc: u64, b: &u8| (acc << 8) | u64::from(*b);
        Some(if self.big_endian { bytes.iter().fold(0, fold) } else { bytes.iter().rev().fold(0, fold) })
    }

    fn section(&self, index: u64) -> Option<Section> {
        let at = self.shoff.checked_add(index.checked_mul(self.shentsize)?)?;
        let w = if self.wide { 8 } else { 4 };
        let (flags, offset, size, link) = if self.wide { (8, 24, 32, 40) } else { (8, 16, 20, 24) };
        Some(Section {
            name: self.word(at, 4)?,
            kind: self.word(at + 4, 4)?,
            flags: self.word(at + flags, w)?,
            offset: self.word(at + offset, w)?,
            size: self.word(at + size, w)?,
            link: self.word(at + link, 4)?,
        })
    }

    /// The number of sections and the section-name table. A file with 0xff00 sections or
    /// more keeps the count, and the name table's index, in section 0 (the ELF spec's escape).
    fn section_table(&self) -> Option<(u64, Section)> {
        let first = self.section(0)?;
        let count = if self.shnum == 0 { first.size } else { self.shnum };
        let names = if self.shstrndx == 0xffff { first.link } else { self.shstrndx };
        // Bounded by the file: a header cannot claim more sections than fit in it.
        if count.checked_mul(self.shentsize)? > self.file.len() as u64 {
            return None;
        }
        Some((count, self.section(names)?))
    }

    /// The NUL-terminated name at `offset` of the name table `names`.
    fn name(&self, names: &Section, offset: u64) -> Option<&'a [u8]> {
        if offset >= names.size {
            return None;
        }
        let start = usize::try_from(names.offset.checked_add(offset)?).ok()?;
        let end = usize::try_from(names.offset.checked_add(names.size)?).ok()?;
        let table = self.file.get(start..end.min(self.file.len()))?;
        Some(&table[..table.iter().position(|b| *b == 0)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A minimal ELF file: a header and, after it, the section headers for `sections` (name,
    /// type, flags, size), a name table last. Little- or big-endian, 32 or 64 bits.
    fn elf(wide: bool, big_endian: bool, sections: &[(&str, u32, u64, u64)]) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, v: u64, len: usize| {
            let bytes = v.to_be_bytes();
            let field = &bytes[8 - len..];
            if big_endian { out.extend_from_slice(field) } else { out.extend(field.iter().rev()) }
        };
        let (header, entsize, w) = if wide { (64usize, 64usize, 8) } else { (52, 40, 4) };
        let mut names = vec![0u8];
        let mut name_at = Vec::new();
        for (name, ..) in sections {
            name_at.push(names.len() as u64);
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        let strtab_name = names.len() as u64;
        names.extend_from_slice(b".shstrtab\0");
        let count = sections.len() + 2; // the null section, then the given ones, then names
        let names_offset = (header + count * entsize) as u64;
        let mut out = b"\x7fELF".to_vec();
        out.extend([if wide { 2 } else { 1 }, if big_endian { 2 } else { 1 }, 1]);
        out.resize(16, 0);
        put(&mut out, 2, 2); // e_type: executable
        put(&mut out, 62, 2); // e_machine
        put(&mut out, 1, 4); // e_version
        put(&mut out, 0, w); // e_entry
        put(&mut out, 0, w); // e_phoff
        put(&mut out, header as u64, w); // e_shoff
        put(&mut out, 0, 4); // e_flags
        put(&mut out, header as u64, 2); // e_ehsize
        put(&mut out, 0, 2); // e_phentsize
        put(&mut out, 0, 2); // e_phnum
        put(&mut out, entsize as u64, 2);
        put(&mut out, count as u64, 2);
        put(&mut out, (count - 1) as u64, 2);
        assert_eq!(out.len(), header);
        let entry = |out: &mut Vec<u8>, name: u64, kind: u32, flags: u64, offset: u64, size: u64| {
            let start = out.len();
            put(out, name, 4);
            put(out, u64::from(kind), 4);
            put(out, flags, w);
            put(out, 0, w); // sh_addr
            put(out, offset, w);
            put(out, size, w);
            out.resize(start + entsize, 0);
        };
        entry(&mut out, 0, 0, 0, 0, 0);
        for ((_, kind, flags, size), name) in sections.iter().zip(&name_at) {
            // The sections' bytes are not in the file: only their headers are read.
            entry(&mut out, *name, *kind, *flags, 0, *size);
        }
        entry(&mut out, strtab_name, 3, 0, names_offset, names.len() as u64);
        out.extend_from_slice(&names);
        out
    }

    #[test]
    fn an_unstripped_agent_is_recognised_by_its_debug_sections() {
        let unstripped = [
            (".text", 1, 0x6, 4096),
            (".debug_gdb_scripts", 1, 0x2, 34),
            (".debug_info", 1, 0, 60 << 20),
            (".debug_line", 1, 0, 9 << 20),
            (".zdebug_str", 1, 0, 1 << 20),
            (".bss", 8, 0x3, 1 << 20),
        ];
        for (wide, big_endian) in [(true, false), (true, true), (false, false), (false, true)] {
            let found = debug_sections(&elf(wide, big_endian, &unstripped));
            assert_eq!(found, Some(DebugSections { count: 3, bytes: 70 << 20 }), "wide {wide}, big-endian {big_endian}");
            // A loaded `.debug_gdb_scripts` alone is what a stripped Rust binary keeps.
            let stripped = debug_sections(&elf(wide, big_endian, &[(".text", 1, 0x6, 4096), (".debug_gdb_scripts", 1, 0x2, 34)]));
            assert_eq!(stripped, None);
        }
    }

    #[test]
    fn the_warning_names_the_file_the_size_and_the_fix() {
        let agent = AgentBinary::new(elf(true, false, &[(".debug_info", 1, 0, 90 << 20)]), 3);
        let debug = agent.debug.as_ref().expect("debug sections");
        let warning = debug_warning(std::path::Path::new("target/release/drover-agent"), 111 << 20, debug);
        assert_eq!(
            warning,
            "agent_binary target/release/drover-agent carries 1 debug sections (90.0 MiB of its 111.0 MiB) that every enrolling host \
             downloads: serve a stripped build (`strip --strip-debug`, or the drover-coordinator package's /usr/lib/drover/drover-agent)"
        );
        assert_eq!(agent.downloads.in_flight(), 0);
        assert_eq!(AgentBinary::new(b"!<arch>\ndebian-binary".to_vec(), 3).debug, None, "a package is no ELF file");
    }

    #[test]
    fn a_file_that_is_not_elf_or_is_cut_short_is_read_without_a_panic() {
        let good = elf(true, false, &[(".debug_info", 1, 0, 100)]);
        assert!(debug_sections(&good).is_some());
        for cut in 0..good.len() {
            let _ = debug_sections(&good[..cut]);
        }
        assert_eq!(debug_sections(b"#!/bin/sh\necho not an agent\n"), None);
        assert_eq!(debug_sections(b""), None);
        // A header claiming more sections than the file holds.
        let mut lying = good.clone();
        lying[0x3C] = 0xff;
        lying[0x3D] = 0xfe;
        assert_eq!(debug_sections(&lying), None);
    }

    /// A real binary, as `objcopy` adds debug info to and `strip --strip-debug` removes it
    /// from, where binutils is installed (CI and the Debian build have it).
    #[test]
    fn a_real_binary_with_and_without_debug_info() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let exe = std::env::current_exe().expect("this test binary");
        let with = tmp.path().join("with-debug");
        let payload = tmp.path().join("payload");
        std::fs::write(&payload, vec![7u8; 4096]).expect("payload");
        let objcopy = std::process::Command::new("objcopy")
            .arg("--add-section")
            .arg(format!(".debug_info={}", payload.display()))
            .arg(&exe)
            .arg(&with)
            .status()
            .expect("objcopy (binutils) is needed for this test");
        assert!(objcopy.success(), "objcopy --add-section");
        let found = debug_sections(&std::fs::read(&with).expect("read")).expect("debug info found");
        assert!(found.bytes >= 4096, "{found:?}");
        let without = tmp.path().join("without-debug");
        let status = std::process::Command::new("objcopy").arg("--strip-debug").arg(&with).arg(&without).status().expect("objcopy");
        assert!(status.success(), "objcopy --strip-debug");
        assert_eq!(debug_sections(&std::fs::read(&without).expect("read")), None);
    }

    async fn body_of(resp: Response) -> Bytes {
        resp.into_body().collect().await.expect("body").to_bytes()
    }

    #[tokio::test]
    async fn a_flood_of_agent_downloads_is_answered_503_with_retry_after_past_the_limit() {
        let agent = Bytes::from(vec![0xA5u8; 3 * CHUNK + 17]);
        let downloads = Downloads::new(2);
        let first = downloads.answer(&agent, "application/octet-stream");
        let second = downloads.answer(&agent, "application/octet-stream");
        assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));
        assert_eq!(first.body().size_hint().exact(), Some(agent.len() as u64), "Content-Length holds");
        assert_eq!(downloads.in_flight(), 2);
        for _ in 0..5 {
            let busy = downloads.answer(&agent, "application/octet-stream");
            assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(busy.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("5"));
            let text = String::from_utf8(body_of(busy).await.to_vec()).expect("utf-8");
            assert!(text.contains("downloads_busy") && text.contains("2 agent downloads are in progress"), "{text}");
        }
        // A download read to its end gives its slot back, and was the whole file.
        assert_eq!(body_of(first).await, agent);
        assert_eq!(downloads.in_flight(), 1);
        // So does one whose client went away.
        drop(second);
        assert_eq!(downloads.in_flight(), 0);
        assert_eq!(downloads.answer(&agent, "application/octet-stream").status(), StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn a_download_that_stops_reading_gives_its_slot_back_after_slot_secs() {
        let agent = Bytes::from(vec![1u8; 2 * CHUNK]);
        let downloads = Downloads::new(1);
        let mut stalled = downloads.answer(&agent, "application/octet-stream").into_body();
        let piece = stalled.frame().await.expect("a frame").expect("data");
        assert_eq!(piece.into_data().expect("data").len(), CHUNK);
        assert_eq!(downloads.answer(&agent, "application/octet-stream").status(), StatusCode::SERVICE_UNAVAILABLE);
        tokio::time::advance(Duration::from_secs(SLOT_SECS - 1)).await;
        assert_eq!(downloads.in_flight(), 1, "still within its time");
        tokio::time::advance(Duration::from_secs(2)).await;
        // The timer task runs once the runtime gets to it: a bounded number of turns.
        for _ in 0..100 {
            if downloads.in_flight() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(downloads.in_flight(), 0, "the slot is back though the body is still held");
        assert_eq!(downloads.answer(&agent, "application/octet-stream").status(), StatusCode::OK);
        // The stalled download itself may still finish: its bytes are not taken from it.
        assert_eq!(stalled.collect().await.expect("rest").to_bytes().len(), CHUNK);
    }
}
