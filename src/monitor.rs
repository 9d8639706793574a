//! Resource monitoring for the records: node CPU utilisation and host memory from /proc, and
//! accelerator utilisation and memory through NVML when `libnvidia-ml.so.1` can be loaded
//! at run time (absent: one log line, and those fields are NaN). A background thread
//! samples every interval into a queue that the group leader drains into `group-<g>.h5`
//! between epochs (HDF5 files are written from one thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aiperf_records::schema::MonitorRow;

/// Busy and total jiffies of all CPUs, from the first line of /proc/stat.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Host memory in use (MemTotal − MemAvailable), bytes.
fn host_mem_used() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024.0)
    };
    Some(field("MemTotal:")? - field("MemAvailable:")?)
}

/// NVML's library, as the driver installs it.
const NVML: &str = "libnvidia-ml.so.1";

/// Where to look for NVML: the loader's search path first, then beside the CUDA driver this
/// process mapped (containers often put the driver's libraries in a folder of their own),
/// then the folders drivers are usually installed in.
fn nvml_candidates() -> Vec<std::path::PathBuf> {
    let mut c = vec![std::path::PathBuf::from(NVML)];
    let cuda = crate::host::mapped_file(|p| p.contains("/libcuda.so"));
    if let Some(dir) = cuda.as_deref().and_then(std::path::Path::parent) {
        c.push(dir.join(NVML));
    }
    for dir in [
        "/usr/local/nvidia/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
    ] {
        c.push(std::path::Path::new(dir).join(NVML));
    }
    c
}

/// NVML, loaded at run time.
struct Nvml {
    _lib: libloading::Library,
    devices: Vec<*mut std::ffi::c_void>,
    utilization: unsafe extern "C" fn(*mut std::ffi::c_void, *mut [u32; 2]) -> i32,
    memory: unsafe extern "C" fn(*mut std::ffi::c_void, *mut [u64; 3]) -> i32,
    name: unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_char, u32) -> i32,
    driver: unsafe extern "C" fn(*mut std::ffi::c_char, u32) -> i32,
}

// SAFETY: NVML handles are process-wide and NVML is thread-safe; the monitor thread is the
// only user.
unsafe impl Send for Nvml {}

impl Nvml {
    /// Loads NVML and opens every device; `Err` says why not.
    fn load() -> Result<Nvml, String> {
        // SAFETY: loading NVML runs its initialisers, which have no preconditions; every
        // symbol is used with the signature of nvml.h (return code nvmlReturn_t = int,
        // handles as pointers, nvmlUtilization_t = {gpu, memory} u32, nvmlMemory_t =
        // {total, free, used} u64).
        unsafe {
            // The first candidate's error is the one to report (the loader's own search).
            let (mut lib, mut first_error) = (None, None);
            for c in nvml_candidates() {
                match libloading::Library::new(&c) {
                    Ok(l) => {
                        lib = Some(l);
                        break;
                    }
                    Err(e) => {
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            let lib = lib
                .ok_or_else(|| format!("NVML not loaded ({})", first_error.unwrap_or_default()))?;
            let init: libloading::Symbol<unsafe extern "C" fn() -> i32> =
                lib.get(b"nvmlInit_v2\0").map_err(|e| e.to_string())?;
            if init() != 0 {
                return Err("nvmlInit failed".into());
            }
            let count_fn: libloading::Symbol<unsafe extern "C" fn(*mut u32) -> i32> = lib
                .get(b"nvmlDeviceGetCount_v2\0")
                .map_err(|e| e.to_string())?;
            let handle_fn: libloading::Symbol<
                unsafe extern "C" fn(u32, *mut *mut std::ffi::c_void) -> i32,
            > = lib
                .get(b"nvmlDeviceGetHandleByIndex_v2\0")
                .map_err(|e| e.to_string())?;
            let utilization = *lib
                .get(b"nvmlDeviceGetUtilizationRates\0")
                .map_err(|e| e.to_string())?;
            let memory = *lib
                .get(b"nvmlDeviceGetMemoryInfo\0")
                .map_err(|e| e.to_string())?;
            let name = *lib.get(b"nvmlDeviceGetName\0").map_err(|e| e.to_string())?;
            let driver = *lib
                .get(b"nvmlSystemGetDriverVersion\0")
                .map_err(|e| e.to_string())?;
            let mut count = 0u32;
            if count_fn(&mut count) != 0 || count == 0 {
                return Err("NVML sees no device".into());
            }
            let mut devices = Vec::new();
            for i in 0..count {
                let mut h = std::ptr::null_mut();
                if handle_fn(i, &mut h) == 0 {
                    devices.push(h);
                }
            }
            Ok(Nvml {
                _lib: lib,
                devices,
                utilization,
                memory,
                name,
                driver,
            })
        }
    }

    /// A string NVML writes into a buffer of `len` bytes (nvml.h's name and version buffers
    /// are at most 96 and 80 bytes).
    fn string(write: impl FnOnce(*mut std::ffi::c_char, u32) -> i32) -> Option<String> {
        let mut buf = [0 as std::ffi::c_char; 128];
        if write(buf.as_mut_ptr(), buf.len() as u32) != 0 {
            return None;
        }
        // SAFETY: on success NVML wrote a NUL-terminated string into `buf`; the last byte
        // is forced to NUL in case it did not.
        buf[buf.len() - 1] = 0;
        let c = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Some(c.to_string_lossy().into_owned())
    }

    /// The devices' names and the driver's version.
    fn describe(&self) -> Accelerators {
        // SAFETY: the handles are NVML's and the buffers match the lengths passed.
        let names = self
            .devices
            .iter()
            .map(|&d| {
                Nvml::string(|b, n| unsafe { (self.name)(d, b, n) })
                    .unwrap_or_else(|| "unnamed".into())
            })
            .collect();
        let driver = Nvml::string(|b, n| unsafe { (self.driver)(b, n) });
        Accelerators {
            names,
            driver,
            nvml: "loaded".into(),
        }
    }

    /// Mean utilisation in [0, 1] over the node's devices that report it, and the memory in
    /// use summed over those that report it; each NaN when none does (a MIG-partitioned GPU
    /// reports memory but no utilisation, so the two are asked for separately).
    fn sample(&self) -> (f64, f64) {
        let (mut util, mut nu, mut mem, mut nm) = (0.0, 0usize, 0.0, 0usize);
        for &d in &self.devices {
            let (mut u, mut m) = ([0u32; 2], [0u64; 3]);
            // SAFETY: `d` is a handle NVML returned; the out-parameters match nvml.h.
            if unsafe { (self.utilization)(d, &mut u) } == 0 {
                util += f64::from(u[0]) / 100.0;
                nu += 1;
            }
            // SAFETY: as above.
            if unsafe { (self.memory)(d, &mut m) } == 0 {
                mem += m[2] as f64;
                nm += 1;
            }
        }
        (
            if nu == 0 { f64::NAN } else { util / nu as f64 },
            if nm == 0 { f64::NAN } else { mem },
        )
    }
}

/// The node's accelerators as NVML names them, for `aiperf doctor`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Accelerators {
    /// Each device's name (e.g. `NVIDIA H200`), in NVML's order.
    pub names: Vec<String>,
    /// The driver's version.
    pub driver: Option<String>,
    /// `loaded`, or why NVML could not be used (then the monitor records no accelerator
    /// figures).
    pub nvml: String,
}

/// Asks NVML for the node's accelerators; without NVML, no names and the reason.
pub fn accelerators() -> Accelerators {
    match Nvml::load() {
        Ok(n) => n.describe(),
        Err(why) => Accelerators {
            nvml: why,
            ..Accelerators::default()
        },
    }
}

/// A running sampler; dropping it stops the thread.
pub struct Monitor {
    rows: Arc<Mutex<Vec<MonitorRow>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Samples every `interval`, timestamps from `now` (the common clock). The first sample
    /// is taken one interval after the start (CPU utilisation needs two readings).
    pub fn start(interval: Duration, now: impl Fn() -> f64 + Send + 'static) -> Monitor {
        let rows = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(&rows), Arc::clone(&stop));
        let handle = std::thread::Builder::new()
            .name("monitor".into())
            .spawn(move || {
                let nvml = match Nvml::load() {
                    Ok(n) => Some(n),
                    Err(why) => {
                        log::info!("monitor: {why}; accelerator utilisation is not recorded");
                        None
                    }
                };
                let mut last = cpu_times();
                let mut next = Instant::now() + interval;
                while !s.load(Ordering::Relaxed) {
                    if Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(100).min(interval));
                        continue;
                    }
                    next += interval;
                    let cur = cpu_times();
                    let cpu_util = match (last, cur) {
                        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                            (b1 - b0) as f64 / (t1 - t0) as f64
                        }
                        _ => f64::NAN,
                    };
                    last = cur;
                    let (accel_util, accel_mem_bytes) =
                        nvml.as_ref().map_or((f64::NAN, f64::NAN), Nvml::sample);
                    r.lock().expect("monitor queue").push(MonitorRow {
                        time_s: now(),
                        accel_util,
                        accel_mem_bytes,
                        cpu_util,
                        host_mem_bytes: host_mem_used().unwrap_or(f64::NAN),
                    });
                }
            })
            .expect("spawning the monitor thread");
        Monitor {
            rows,
            stop,
            handle: Some(handle),
        }
    }

    /// The samples taken since the last call.
    pub fn drain(&self) -> Vec<MonitorRow> {
        std::mem::take(&mut *self.rows.lock().expect("monitor queue"))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_is_looked_for_on_the_search_path_then_where_drivers_live() {
        let c = nvml_candidates();
        assert_eq!(c[0], std::path::PathBuf::from(NVML));
        assert!(c.contains(&std::path::PathBuf::from(
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1"
        )));
        // No driver on the test machine: no names, and the reason instead.
        let a = accelerators();
        if a.nvml != "loaded" {
            assert!(
                a.names.is_empty() && a.nvml.starts_with("NVML not loaded ("),
                "{a:?}"
            );
        }
    }

    #[test]
    fn samples_cpu_and_memory_from_proc() {
        let (busy, total) = cpu_times().expect("/proc/stat");
        assert!(busy <= total && total > 0);
        let mem = host_mem_used().expect("/proc/meminfo");
        assert!(mem > 0.0);
        let m = Monitor::start(Duration::from_millis(150), || 42.0);
        // Keep a core busy so the utilisation is measurably above zero.
        let until = Instant::now() + Duration::from_millis(700);
        let mut x = 0u64;
        while Instant::now() < until {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let rows = m.drain();
        assert!(rows.len() >= 2, "{} samples", rows.len());
        for r in &rows {
            assert_eq!(r.time_s, 42.0);
            assert!(r.cpu_util > 0.0 && r.cpu_util <= 1.0, "{}", r.cpu_util);
            assert!(r.host_mem_bytes > 0.0);
        }
    }
}
