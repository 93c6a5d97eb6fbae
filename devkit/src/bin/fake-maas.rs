//! `fake-maas`: a fake MAAS region API 2.0 for tests and `drover dev`. The behaviour, the
//! command line and the `/_fake/` control API are documented in
//! `drover_devkit::fake_maas`; this binary only parses the arguments and runs it.

#![forbid(unsafe_code)]

use drover_devkit::fake_maas::{Args, USAGE, run};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-maas: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("fake-maas: {e}");
        std::process::exit(1);
    }
}
