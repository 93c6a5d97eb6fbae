//! `fake-shelf`: a fake Redfish power shelf (PowerEquipment, one PowerShelf, outlets with
//! `#Outlet.PowerControl`, an `UpdateService` whose `SimpleUpdate` answers 202 and a task
//! monitor, and optionally `ComputerSystem`s with `#ComputerSystem.Reset` that can be made
//! to never converge) over HTTPS for tests and `drover dev`. The behaviour, the command
//! line and the `/_fake/` control API are documented in `drover_devkit::fake_shelf`; this
//! binary only parses the arguments and runs it.

#![forbid(unsafe_code)]

use drover_devkit::fake_shelf::{Args, USAGE, run};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-shelf: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("fake-shelf: {e}");
        std::process::exit(1);
    }
}
