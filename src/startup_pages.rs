//! Giving back the executable's pages that only the start of a run needed.
//!
//! Why: a waiting zklock may wait for hours, one per queued host or job, and
//! every page of zklock's executable it touched on its way into the queue
//! stays mapped in it, counted in its resident size: the loader's relocation
//! table (.rela.dyn, 217 KiB, read once before `main`) and the code that ran
//! outside the hot functions (bench/hot-text.ld), about 0.2 MiB and up to
//! 0.45 MiB in a waiter that queued during a busy start. Neither is needed
//! again on the way out of the queue (the hot functions are kept).
//!
//! How: `madvise(MADV_DONTNEED)` on those ranges. They lie in segments the
//! executable maps read-only from its file and nothing writes, so their pages
//! are still the file's bytes: dropped, they stay in the page cache (shared
//! with every other zklock), and a later access maps the same bytes again
//! (a minor page fault). Only page-aligned ranges inside non-writable
//! segments are given back, and nothing if the executable has text
//! relocations (the loader would have written to those segments).
//!
//! A debugger's breakpoint or a uprobe placed in cold code before the pages
//! are given back is lost with them (it lives in a private copy of the page).
//! Pages mapped again come from the file zklock was started from: package
//! managers replace a binary by renaming a new file over it, which leaves
//! the old one in place for as long as it is mapped.

use std::ops::Range;

const PAGE: usize = 4096;
/// The kernel maps up to this much around a faulting page of a file
/// (fault-around): the ranges stop short of the window of the PLT, which
/// every call into libc goes through.
const FAULT_AROUND: usize = 64 * 1024;

/// Gives the pages back; a no-op where they cannot be found.
pub fn give_back() {
    let Some(image) = Image::of_this_process() else {
        return;
    };
    for range in image.startup_ranges() {
        // SAFETY: the range is page-aligned and lies in a read-only segment
        // of our own executable, mapped privately from its file and never
        // written (no text relocations): the pages dropped are equal to the
        // file's, and the next access maps them again. No reference into the
        // range is invalidated: its contents do not change.
        unsafe {
            libc::madvise(
                range.start as *mut libc::c_void,
                range.len(),
                libc::MADV_DONTNEED,
            );
        }
    }
}

/// The executable as loaded: its read-only segments and where the
/// relocation table and the cold code are, at their run-time addresses.
struct Image {
    read_only: Vec<Range<usize>>,
    relocations: Option<Range<usize>>,
    cold_code: Option<Range<usize>>,
}

impl Image {
    fn of_this_process() -> Option<Image> {
        // SAFETY: getauxval reads the auxiliary vector the kernel passed.
        let (phdr, phnum) = unsafe {
            (
                libc::getauxval(libc::AT_PHDR) as usize,
                libc::getauxval(libc::AT_PHNUM) as usize,
            )
        };
        if phdr == 0 || phnum == 0 {
            return None;
        }
        // SAFETY: AT_PHDR and AT_PHNUM describe the executable's program
        // headers, which the kernel mapped with it for as long as it runs.
        let headers = unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
        let bias = phdr.checked_sub(
            headers
                .iter()
                .find(|header| header.p_type == libc::PT_PHDR)?
                .p_vaddr as usize,
        )?;
        let mut image = Image {
            read_only: Vec::new(),
            relocations: None,
            cold_code: None,
        };
        for header in headers {
            let start = bias + header.p_vaddr as usize;
            let end = start + header.p_memsz as usize;
            match header.p_type {
                libc::PT_LOAD if header.p_flags & libc::PF_W == 0 => {
                    image.read_only.push(start..end);
                    if header.p_flags & libc::PF_X != 0 {
                        image.cold_code =
                            hot_text_end().and_then(|hot_end| cold_code(start..end, hot_end));
                    }
                }
                libc::PT_DYNAMIC => {
                    let entries = header.p_memsz as usize / size_of::<DynamicEntry>();
                    // SAFETY: PT_DYNAMIC is the loaded dynamic section, an
                    // array of entries; the loader keeps it for the run.
                    let dynamic = unsafe {
                        std::slice::from_raw_parts(start as *const DynamicEntry, entries)
                    };
                    image.relocations = relocations(dynamic, bias)?;
                }
                _ => {}
            }
        }
        Some(image)
    }

    /// The page-aligned ranges to give back, each inside a read-only segment.
    fn startup_ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        [self.relocations.clone(), self.cold_code.clone()]
            .into_iter()
            .flatten()
            .map(|range| align_inward(range, PAGE))
            .filter(|range| !range.is_empty())
            .filter(|range| {
                self.read_only
                    .iter()
                    .any(|segment| segment.start <= range.start && range.end <= segment.end)
            })
    }
}

/// An entry of the dynamic section (Elf64_Dyn, which the libc crate lacks).
#[repr(C)]
struct DynamicEntry {
    tag: i64,
    value: u64,
}

/// The relocation table named by the dynamic section; None (give nothing
/// back) if the executable has text relocations.
fn relocations(dynamic: &[DynamicEntry], bias: usize) -> Option<Option<Range<usize>>> {
    const DT_NULL: u64 = 0;
    const DT_RELA: u64 = 7;
    const DT_RELASZ: u64 = 8;
    const DT_TEXTREL: u64 = 22;
    const DT_FLAGS: u64 = 30;
    const DF_TEXTREL: u64 = 4;
    let (mut address, mut size) = (None, None);
    for entry in dynamic {
        match entry.tag as u64 {
            DT_NULL => break,
            DT_TEXTREL => return None,
            DT_FLAGS if entry.value & DF_TEXTREL != 0 => return None,
            DT_RELA => address = Some(entry.value as usize),
            DT_RELASZ => size = Some(entry.value as usize),
            _ => {}
        }
    }
    let (Some(address), Some(size)) = (address, size) else {
        return Some(None);
    };
    let start = run_time(address, bias);
    Some(Some(start..start + size))
}

/// glibc's loader rewrites the dynamic section's addresses to run-time ones
/// in place on some architectures and leaves them as linked on others; a
/// position-independent executable's link-time addresses are all below its
/// load address.
fn run_time(address: usize, bias: usize) -> usize {
    if address >= bias {
        address
    } else {
        bias + address
    }
}

/// The code segment's part after the hot functions, short of the last
/// fault-around window (the PLT and the loader's entry points live there).
fn cold_code(segment: Range<usize>, hot_end: usize) -> Option<Range<usize>> {
    if !segment.contains(&hot_end) {
        return None;
    }
    Some(hot_end..(segment.end - 1) / FAULT_AROUND * FAULT_AROUND)
}

/// Where bench/hot-text.ld's hot functions end, when build.rs linked with it.
#[cfg(all(zklock_hot_text, not(test)))]
fn hot_text_end() -> Option<usize> {
    unsafe extern "C" {
        static __zklock_hot_text_end: u8;
    }
    Some(&raw const __zklock_hot_text_end as usize)
}

#[cfg(not(all(zklock_hot_text, not(test))))]
fn hot_text_end() -> Option<usize> {
    None
}

/// The largest `align`-aligned range inside `range`.
fn align_inward(range: Range<usize>, align: usize) -> Range<usize> {
    let start = range.start.div_ceil(align) * align;
    let end = range.end / align * align;
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_shrink_to_whole_pages() {
        assert_eq!(align_inward(0x1d28..0x381d8, PAGE), 0x2000..0x38000);
        assert_eq!(align_inward(0x1000..0x2000, PAGE), 0x1000..0x2000);
        assert!(align_inward(0x1010..0x1ff0, PAGE).is_empty());
    }

    #[test]
    fn cold_code_stops_short_of_the_plt_window() {
        let segment = 0x15_7c00..0x5d_5bb0;
        assert_eq!(
            cold_code(segment.clone(), 0x23_3cd7),
            Some(0x23_3cd7..0x5d_0000)
        );
        assert_eq!(cold_code(segment, 0x10_0000), None);
    }

    #[test]
    fn dynamic_addresses_are_taken_to_run_time() {
        let bias = 0x5555_0000_0000;
        assert_eq!(run_time(0x1d28, bias), bias + 0x1d28);
        assert_eq!(run_time(bias + 0x1d28, bias), bias + 0x1d28);
        assert_eq!(run_time(0x40_1d28, 0), 0x40_1d28);
    }

    /// A dynamic section naming a relocation table, after `first` entries.
    fn dynamic_section(first: &[(i64, u64)]) -> Vec<DynamicEntry> {
        let table = [(7, 0x1d28), (8, 0x36258), (0, 0)];
        (first.iter().chain(&table))
            .map(|&(tag, value)| DynamicEntry { tag, value })
            .collect()
    }

    #[test]
    fn text_relocations_give_nothing_back() {
        let bias = 0x1000_0000;
        assert_eq!(
            relocations(&dynamic_section(&[]), bias),
            Some(Some(0x1000_1d28..0x1003_7f80))
        );
        // DT_TEXTREL, and DT_FLAGS with DF_TEXTREL.
        assert_eq!(relocations(&dynamic_section(&[(22, 0)]), bias), None);
        assert_eq!(relocations(&dynamic_section(&[(30, 4)]), bias), None);
        let empty = [DynamicEntry { tag: 0, value: 0 }];
        assert_eq!(relocations(&empty, bias), Some(None));
    }

    /// The test binary itself: the relocation table is found and lies in a
    /// read-only segment, and giving it back leaves the process working.
    #[test]
    fn this_executable_gives_back_its_relocation_table() {
        let image = Image::of_this_process().expect("program headers");
        let ranges: Vec<_> = image.startup_ranges().collect();
        assert!(!ranges.is_empty(), "{:x?}", image.relocations);
        give_back();
        assert_eq!(format!("{}", 6 * 7), "42");
    }
}
