# A small image with zklock as its entry point:
#   docker build -t zklock .
#   docker run --rm zklock run -z zk1:2181 /locks/job -- echo hello
# zklock reaps orphans when it runs as PID 1, so --init is not needed.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked

FROM debian:bookworm-slim
COPY --from=build /src/target/release/zklock /usr/local/bin/zklock
ENTRYPOINT ["/usr/local/bin/zklock"]
