# A small image with zklock as its entry point:
#   docker build -t zklock .
#   docker run --rm zklock run -z zk1:2181 /locks/job -- echo hello
# zklock reaps orphans when it runs as PID 1, so --init is not needed.
# What the image holds, and why: docs/examples.md ("In a container") and
# docs/design.md ("Choices and their reasons"). .ci/image builds and tests it.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
# The crates are fetched in their own layer, so a change to src/ alone does
# not download them again.
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
RUN mkdir src && echo 'fn main() {}' >src/main.rs && cargo fetch --locked && rm -r src
COPY src ./src
RUN cargo build --release --locked --offline --bin zklock

# The runtime: Debian's slim base (glibc, which zklock links, and a POSIX
# shell for `-c STRING`), Mozilla's CA bundle for TLS and --ping URLs, the
# binary, and an unprivileged user.
FROM debian:bookworm-slim
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /src/target/release/zklock /usr/local/bin/zklock
RUN useradd --uid 10001 --user-group --create-home --shell /bin/sh zklock
USER 10001:10001
WORKDIR /home/zklock
ENTRYPOINT ["/usr/local/bin/zklock"]
CMD ["--help"]
