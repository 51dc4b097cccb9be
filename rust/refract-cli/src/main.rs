//! The `refract` command-line tool.

fn main() {
    println!("refract");
}
