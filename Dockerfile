# headroom: multi-stage build. The result is a distroless image running as non-root, with
# only the `headroom` binary (rustls: no OpenSSL, no shell).
#
#   docker build -t headroom:0.1.0 .
#   kubectl apply -k deploy/
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin headroom \
 && cp target/release/headroom /headroom \
 && strip /headroom

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /headroom /usr/local/bin/headroom
USER 65532:65532
EXPOSE 10260
ENTRYPOINT ["/usr/local/bin/headroom"]
CMD ["serve"]
