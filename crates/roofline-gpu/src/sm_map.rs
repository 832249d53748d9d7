//! Which SMs share a GPC (graphics processing cluster), measured: CUDA exposes an SM's index (`%smid`) but not its
//! GPC, while a thread-block cluster's CTAs always run on SMs of one GPC. So [`map_gpcs`] launches grids of clusters
//! (every size from 16 CTAs where the device allows that, down to 2), each CTA alone on its SM (more than half an SM's
//! shared memory) and holding it for a while so that the grid's clusters are resident together, records each CTA's SM,
//! and joins the SMs that met in a cluster ([`gpc_groups`]). The ring GEMV's CTAs end up to 1 us apart at
//! 1x14336x4096 (bench/RESULTS.md, session 62); whether the slow ones share GPCs is what this map is for
//! (`ring_trace --gpcs`).

use std::ffi::c_void;

use cudarc::driver::DevicePtrMut;

use crate::weight_only::nvrtc::{compile_cubin_cached, load_checked};
use crate::weight_only::{launch_cluster_ex, max_active_clusters};
use crate::{Gpu, GpuError};

/// The kernel: each CTA's thread 0 writes its SM to `out[blockIdx.x]`, touches its shared memory and holds its SM
/// for `spin_ns` of the globaltimer.
const SOURCE: &str = r#"
extern "C" __global__ void sm_map(unsigned* out, unsigned long long spin_ns) {
    extern __shared__ unsigned char pad[];
    if (threadIdx.x == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        out[blockIdx.x] = s;
        pad[0] = (unsigned char)s;
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        } while (t - t0 < spin_ns);
    }
}
"#;

/// Cluster sizes tried, largest first (past 8 needs the non-portable size, which Hopper allows). Not only powers of
/// two: on the H200 (session 64) clusters of 16, 8, 4 and 2 always left the same TPC (SM pair) of some GPCs out of
/// every cluster, because 18 SMs hold one cluster of 16 and a pair, and those pairs came out as GPCs of their own.
/// Sizes such as 6, 10 or 14 tile a GPC differently, so the pairs meet the rest of their GPC.
const CLUSTER_SIZES: [u32; 15] = [16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2];

/// Launches of each cluster size.
const LAUNCHES: usize = 6;

/// How long each CTA holds its SM, ns: long enough that a grid's clusters are all resident at once.
const SPIN_NS: u64 = 200_000;

/// The GPCs found: groups of SMs, each group's SMs in order, the groups by their first SM.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SmMap {
    /// SMs of each GPC.
    pub gpcs: Vec<Vec<u32>>,
    /// The cluster sizes that ran (the device refuses the others).
    pub cluster_sizes: Vec<u32>,
    /// SMs no CTA ran on (each its own group in `gpcs`).
    pub unseen: Vec<u32>,
}

impl SmMap {
    /// The GPC of `sm` (its index in `gpcs`).
    pub fn gpc_of(&self, sm: u32) -> Option<usize> {
        self.gpcs.iter().position(|g| g.contains(&sm))
    }
}

/// Joins the SMs of `sm_count` that met in a cluster: `launches` holds each launch's SM per CTA (block index) and its
/// cluster size, CTAs `c * size .. (c + 1) * size` forming cluster c. Returns the groups (each sorted, by first SM) and
/// the SMs no launch saw; an SM index past `sm_count` is an error.
pub fn gpc_groups(launches: &[(u32, Vec<u32>)], sm_count: u32) -> Result<(Vec<Vec<u32>>, Vec<u32>), String> {
    let n = sm_count as usize;
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut seen = vec![false; n];
    for (size, sms) in launches {
        for cluster in sms.chunks(*size.max(&1) as usize) {
            for &sm in cluster {
                if sm as usize >= n {
                    return Err(format!("SM {sm} reported on a device of {sm_count} SMs"));
                }
                seen[sm as usize] = true;
                let (a, b) = (root(&mut parent, cluster[0] as usize), root(&mut parent, sm as usize));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<u32>> = std::collections::BTreeMap::new();
    for sm in 0..n {
        let r = root(&mut parent, sm);
        groups.entry(r).or_default().push(sm as u32);
    }
    let unseen = (0..n).filter(|&s| !seen[s]).map(|s| s as u32).collect();
    Ok((groups.into_values().collect(), unseen))
}

/// NVRTC's options for the kernel on sm_`arch`.
fn options(arch: u32) -> Vec<String> {
    vec![format!("--gpu-architecture=sm_{arch}"), "--std=c++17".into(), "--ptxas-options=-v".into()]
}

/// Measures which SMs of `gpu` share a GPC (module doc). Needs sm_90 (thread-block clusters) and NVRTC.
pub fn map_gpcs(gpu: &Gpu) -> Result<SmMap, GpuError> {
    use cudarc::driver::sys::CUfunction_attribute as A;
    let (major, minor) = gpu.compute_capability;
    if major < 9 {
        return Err(GpuError::Unsupported(format!(
            "the GPC map needs thread-block clusters (sm_90+), this is sm_{major}{minor}"
        )));
    }
    let arch = (major * 10 + minor) as u32;
    let (cubin, log) = compile_cubin_cached(SOURCE, "sm_map.cu", &options(arch))?;
    // More than half an SM's shared memory a CTA: one CTA an SM.
    let smem = (gpu.smem_per_sm / 2 + 1024).min(gpu.smem_per_sm.saturating_sub(1024)) as u32;
    let (function, _) = load_checked(&gpu.ctx, cubin, &log, "sm_map", "the GPC map", smem)?;
    // Cluster sizes past 8 are non-portable: allowed where the device has them (a failure here leaves 8 the largest).
    let _ = function.set_attribute(A::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    let block = (32, 1, 1);
    let mut launches = Vec::new();
    let mut sizes = Vec::new();
    for size in CLUSTER_SIZES {
        let most = match max_active_clusters(&gpu.stream, &function, block, smem, (size, 1)) {
            Ok(m) if m > 0 => m,
            _ => continue,
        };
        let ctas = most * size;
        let mut out = gpu.stream.alloc_zeros::<u32>(ctas as usize)?;
        for _ in 0..LAUNCHES {
            {
                let (mut out_ptr, _sync) = out.device_ptr_mut(&gpu.stream);
                let mut spin = SPIN_NS;
                let mut params: [*mut c_void; 2] = [(&raw mut out_ptr).cast(), (&raw mut spin).cast()];
                // SAFETY: two parameters, as `sm_map(unsigned* out, unsigned long long spin_ns)` takes them, each a
                // local that lives through the launch; `out` holds `ctas` u32s, one a CTA of the grid (`most`
                // clusters of `size`), and is read back on the same stream below.
                unsafe {
                    launch_cluster_ex(
                        &gpu.stream,
                        &function,
                        (ctas, 1, 1),
                        block,
                        smem,
                        false,
                        (size, 1),
                        &mut params,
                    )?;
                }
            }
            launches.push((size, gpu.stream.clone_dtoh(&out)?));
        }
        sizes.push(size);
    }
    if launches.is_empty() {
        return Err(GpuError::Unsupported("no cluster size could be scheduled for the GPC map".into()));
    }
    let (gpcs, unseen) = gpc_groups(&launches, gpu.sm_count).map_err(GpuError::Unsupported)?;
    Ok(SmMap { gpcs, cluster_sizes: sizes, unseen })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sms_that_meet_in_a_cluster_share_a_group() {
        // 8 SMs, two GPCs {0, 2, 4, 6} and {1, 3, 5, 7}; clusters of 2 meet in pairs that chain each GPC together.
        let launches =
            vec![(2, vec![0, 2, 1, 3, 4, 6, 5, 7]), (2, vec![2, 4, 3, 5]), (4, vec![6, 4, 2, 0]), (2, vec![1, 7])];
        let (groups, unseen) = gpc_groups(&launches, 8).unwrap();
        assert_eq!(groups, vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        assert!(unseen.is_empty());
        // An SM no launch saw stands alone and is named.
        let (groups, unseen) = gpc_groups(&[(2, vec![0, 1])], 3).unwrap();
        assert_eq!((groups, unseen), (vec![vec![0, 1], vec![2]], vec![2]));
        assert!(gpc_groups(&[(2, vec![0, 9])], 8).unwrap_err().contains("SM 9"));
        let map = SmMap { gpcs: vec![vec![0, 2], vec![1]], cluster_sizes: vec![2], unseen: vec![] };
        assert_eq!((map.gpc_of(2), map.gpc_of(1), map.gpc_of(5)), (Some(0), Some(1), None));
    }

    /// On a Hopper GPU: every SM is seen, in 4 to 16 GPCs of at least 2 SMs each (the H100 SXM and H200: 132 SMs in 8
    /// GPCs of 16 to 18).
    #[test]
    #[ignore = "needs an NVIDIA GPU (sm_90+)"]
    fn every_sm_falls_in_a_gpc() {
        let gpu = Gpu::open(0).expect("a GPU");
        if gpu.compute_capability.0 < 9 {
            eprintln!("SKIPPED: clusters need sm_90");
            return;
        }
        let map = map_gpcs(&gpu).expect("the GPC map");
        eprintln!("{} GPCs: {:?} (clusters of {:?})", map.gpcs.len(), map.gpcs, map.cluster_sizes);
        assert!(map.unseen.is_empty(), "SMs no CTA ran on: {:?}", map.unseen);
        assert!((4..=16).contains(&map.gpcs.len()), "{} GPCs", map.gpcs.len());
        assert!(map.gpcs.iter().all(|g| g.len() >= 2), "{:?}", map.gpcs);
        assert_eq!(map.gpcs.iter().map(Vec::len).sum::<usize>(), gpu.sm_count as usize);
    }

    /// The kernel compiles for sm_90 with the options `map_gpcs` gives it, its globaltimer and SM reads in place.
    /// Skipped without NVRTC.
    #[test]
    fn the_map_kernel_compiles() {
        if let Err(e) = crate::weight_only::nvrtc_available() {
            eprintln!("SKIPPED the_map_kernel_compiles: {e}");
            return;
        }
        let (cubin, log) = compile_cubin_cached(SOURCE, "sm_map.cu", &options(90)).expect("sm_map compiles");
        assert_eq!(crate::weight_only::nvrtc::parse_ptxas(&log).1, Some(0), "{log}");
        if let Ok(Some(sass)) = crate::weight_only::nvrtc::disassemble(&cubin) {
            assert!(sass.contains("SR_SM") || sass.contains("SMID"), "no %smid read");
            assert!(sass.contains("GLOBALTIMER"), "no globaltimer read");
        }
    }
}
