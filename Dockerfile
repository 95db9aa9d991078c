# headroom: multi-stage build, for users with a registry. The result has the same layout
# as scripts/image.sh's (built offline in CI with umoci): /usr/local/bin/headroom and its
# kubectl-headroom name, user 65532:65532 (distroless' nonroot), CA certificates, the store
# directory /var/lib/headroom owned by that user, the same labels, entrypoint and command.
#
#   docker build -t headroom:0.1.0 .
#   kubectl apply -k deploy/
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --profile image --locked --bin headroom \
 && cp target/image/headroom /headroom \
 && mkdir -p /out/var/lib/headroom

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /headroom /usr/local/bin/headroom
COPY --from=build /headroom /usr/local/bin/kubectl-headroom
COPY --from=build --chown=65532:65532 /out/var/lib/headroom /var/lib/headroom
LABEL org.opencontainers.image.title="headroom" \
      org.opencontainers.image.description="A Kubernetes scheduler that places pods by what nodes and workloads really use" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.source="https://example.invalid/headroom" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 10260 10261 10262
ENTRYPOINT ["/usr/local/bin/headroom"]
CMD ["serve"]
