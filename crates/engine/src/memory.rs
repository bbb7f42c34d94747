//! Free memory of a GPU adapter, where its driver reports it, for the load's memory check
//! ([`mars_model::MemoryNeeds`]): wgpu and WebGPU report no device memory (only buffer and
//! binding limits), and the one route through wgpu, Vulkan's `VK_EXT_memory_budget` behind
//! `Adapter::as_hal`, is `unsafe`. So the drivers' own safe interfaces are asked instead:
//! NVIDIA's NVML (through `nvml-wrapper`, which cubecl already builds) and AMD's sysfs files on
//! Linux. Other adapters (Intel, Apple, browsers) report nothing and the check is skipped.

use std::path::Path;

/// Free bytes of an adapter and which interface said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeMemory {
    /// Bytes free when the device was opened.
    pub bytes: u64,
    /// `NVML` or `sysfs`.
    pub source: &'static str,
}

/// PCI vendor ids.
const NVIDIA: u32 = 0x10de;
const AMD: u32 = 0x1002;

/// The adapter's free memory: `vendor` and `pci_bus_id` as wgpu's `AdapterInfo` gives them
/// (the bus id `0000:01:00.0`, empty where the backend does not say).
pub fn free_memory(vendor: u32, pci_bus_id: &str) -> Option<FreeMemory> {
    if cfg!(target_arch = "wasm32") {
        return None; // a browser's adapter: no driver interface to ask
    }
    match vendor {
        NVIDIA => nvml_free(pci_bus_id),
        AMD if !pci_bus_id.is_empty() => {
            sysfs_free(&Path::new("/sys/bus/pci/devices").join(pci_bus_id))
        }
        _ => None,
    }
}

/// `mem_info_vram_total` − `mem_info_vram_used` of an amdgpu device's sysfs folder.
pub fn sysfs_free(device: &Path) -> Option<FreeMemory> {
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(device.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (total, used) = (read("mem_info_vram_total")?, read("mem_info_vram_used")?);
    Some(FreeMemory {
        bytes: total.checked_sub(used)?,
        source: "sysfs",
    })
}

/// The same PCI address in the two spellings (`0000:01:00.0` from wgpu, `00000000:01:00.0`
/// from NVML): lower case, the domain's leading zeros dropped.
pub fn same_pci_address(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        match s.split_once(':') {
            Some((domain, rest)) => format!("{}:{rest}", domain.trim_start_matches('0')),
            None => s,
        }
    };
    !a.trim().is_empty() && norm(a) == norm(b)
}

#[cfg(all(feature = "wgpu", any(target_os = "linux", target_os = "windows")))]
fn nvml_free(pci_bus_id: &str) -> Option<FreeMemory> {
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    let count = nvml.device_count().ok()?;
    let device = (0..count).find_map(|i| {
        let device = nvml.device_by_index(i).ok()?;
        let bus = device.pci_info().ok()?.bus_id;
        // A backend that gives no bus id: the only NVIDIA device is the one.
        let ours = same_pci_address(pci_bus_id, &bus) || (pci_bus_id.is_empty() && count == 1);
        ours.then_some(device)
    })?;
    Some(FreeMemory {
        bytes: device.memory_info().ok()?.free,
        source: "NVML",
    })
}

#[cfg(not(all(feature = "wgpu", any(target_os = "linux", target_os = "windows"))))]
fn nvml_free(_: &str) -> Option<FreeMemory> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_free_memory_is_total_less_used() {
        let dir = std::env::temp_dir().join(format!("mars-amdgpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(sysfs_free(&dir), None, "no files: nothing reported");
        std::fs::write(dir.join("mem_info_vram_total"), "25753026560\n").unwrap();
        std::fs::write(dir.join("mem_info_vram_used"), "1073741824\n").unwrap();
        assert_eq!(
            sysfs_free(&dir),
            Some(FreeMemory {
                bytes: 25_753_026_560 - 1_073_741_824,
                source: "sysfs"
            })
        );
        std::fs::write(dir.join("mem_info_vram_used"), "x").unwrap();
        assert_eq!(sysfs_free(&dir), None, "an unreadable count is no report");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn pci_addresses_match_across_spellings() {
        assert!(same_pci_address("0000:01:00.0", "00000000:01:00.0"));
        assert!(same_pci_address("0000:C1:00.0", "00000000:c1:00.0"));
        assert!(!same_pci_address("0000:01:00.0", "00000000:02:00.0"));
        assert!(!same_pci_address("", "00000000:01:00.0"));
        // Other vendors and Apple report nothing.
        assert_eq!(free_memory(0x8086, "0000:00:02.0"), None);
    }
}
