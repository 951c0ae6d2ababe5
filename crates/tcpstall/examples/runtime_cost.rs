//! What naming a process's runtime costs: `runtime_of` (its executable, maps, thread names and
//! script; a native program's ELF sections looked at for Go's build information) timed over
//! ROUNDS calls for each PID given, against reading its `/proc/PID/stat` as often, measured in
//! the same run. Used by scripts/bench-runtime.
//!
//!   cargo run --release --example runtime_cost -- ROUNDS PID...

use std::time::Instant;

use tcpstall::host::runtime::runtime_of;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(rounds) = args.next().and_then(|r| r.parse::<u32>().ok()) else {
        eprintln!("usage: runtime_cost ROUNDS PID...");
        std::process::exit(2);
    };
    println!(
        "{:>8} {:<40} {:>12} {:>12} {:>7}",
        "PID", "RUNTIME", "RUNTIME_US", "STAT_US", "RATIO"
    );
    for arg in args {
        let Ok(pid) = arg.parse::<u32>() else {
            eprintln!("runtime_cost: {arg:?} is not a pid");
            std::process::exit(2);
        };
        let named = runtime_of(pid).map_or("-".to_string(), |r| r.describe());
        let started = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(runtime_of(pid));
        }
        let runtime_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        let started = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(std::fs::read_to_string(format!("/proc/{pid}/stat")).ok());
        }
        let stat_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        println!(
            "{pid:>8} {named:<40} {runtime_us:>12.1} {stat_us:>12.1} {:>7.1}",
            runtime_us / stat_us
        );
    }
}
