#!/usr/bin/env bash
# Installs Apache Kafka (KRaft mode: broker and controller in one JVM, no ZooKeeper) into
# .tools/kafka/<version>/libs, for queue intake and the event stream (docs/queues.md).
#
# Why from Maven Central: the broker is the artifact org.apache.kafka:kafka_2.13 plus its runtime
# dependencies; Maven resolves exactly those jars from the registry, and the JVM runs them with
# `java -cp 'libs/*' kafka.Kafka server.properties` (src/stack/kafka.ts), the same main class as
# Kafka's own launch scripts. The storage tool (kafka.tools.StorageTool) is in the same jar.
# A log4j2 binding (log4j-slf4j2-impl + log4j-core, slf4j-api 2) is added so the broker logs instead of warning
# that it has no logger.
#
# Why 4.1.2: the Kafka client chargeguard uses (@platformatic/kafka) supports brokers 3.5.0 to 4.1.0
# and their patch releases; 4.1.2 is the newest patch of that line. Brokers 4.2 and later worked in
# our tests too, but a broker restart there was where a CI run failed, and an operator should run
# a pair the client's authors test. Pinned, so the broker the tests run only changes when the pin
# does; Kafka 4.x needs Java 17+ for the broker (README).
#
# Offline-friendly: once the jars are there this is a no-op (a marker file written last says the
# copy is whole); with a warm ~/.m2 it runs mvn with -o first.
#
# Env:
#   KAFKA_INSTALL_SKIP  1: install nothing (the Kafka tests then fail with a clear message).
#   MVN                 mvn binary to use (default: `mvn` on PATH).
set -euo pipefail

readonly KAFKA_VERSION="4.1.2"
readonly LOG4J_VERSION="2.26.1"
# Kafka's own dependencies bring slf4j-api 1.7, which cannot see the slf4j 2 binding: pinned here so
# Maven's nearest-wins picks the one the binding needs.
readonly SLF4J_VERSION="2.0.17"
readonly MIN_JAVA_MAJOR=17

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${repo_root}/.tools/kafka/${KAFKA_VERSION}"
marker="${target_dir}/.installed"
mvn_bin="${MVN:-mvn}"

log() { printf '[install-kafka] %s\n' "$*"; }
fail() { printf '[install-kafka] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${KAFKA_INSTALL_SKIP:-0}" == "1" ]]; then
  log "KAFKA_INSTALL_SKIP=1; not installing (the Kafka tests need it)."
  exit 0
fi

if [[ -f "${marker}" ]]; then
  log "Kafka ${KAFKA_VERSION} already installed at ${target_dir}; skipping."
  exit 0
fi

command -v java >/dev/null 2>&1 || fail "java not found: Kafka ${KAFKA_VERSION} needs Java ${MIN_JAVA_MAJOR}+ (README)."
java_major="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
[[ -n "${java_major}" && "${java_major}" -ge "${MIN_JAVA_MAJOR}" ]] \
  || fail "java reports major version '${java_major:-unknown}'; Kafka ${KAFKA_VERSION} needs ${MIN_JAVA_MAJOR}+."
command -v "${mvn_bin}" >/dev/null 2>&1 || fail "mvn not found (Debian: apt-get install maven); it resolves the broker's jars from Maven Central."

started_s=${SECONDS}
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
cat > "${scratch}/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.chargeguard</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>${SLF4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
POM

log "Resolving org.apache.kafka:kafka_2.13:${KAFKA_VERSION} and its runtime jars with Maven (a cold resolve downloads about 40 MB)."
copy() {
  "${mvn_bin}" -q -B "$@" -f "${scratch}/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="${scratch}/libs"
}
# Offline first: with the jars already in the local Maven repository nothing is fetched.
copy -o >/dev/null 2>&1 || copy || fail "mvn could not resolve the Kafka jars; check that Maven Central is reachable."

ls "${scratch}/libs"/kafka_2.13-"${KAFKA_VERSION}".jar >/dev/null 2>&1 || fail "kafka_2.13-${KAFKA_VERSION}.jar missing after the copy."
rm -rf "${target_dir}"
mkdir -p "$(dirname "${target_dir}")"
# Move the whole folder into place, then write the marker: an interrupted install is never taken
# for a whole one.
rm -rf "${target_dir}.partial"
mv "${scratch}/libs" "${target_dir}.partial"
mv "${target_dir}.partial" "${target_dir}"
printf '%s\n' "${KAFKA_VERSION}" > "${marker}"
log "Installed Kafka ${KAFKA_VERSION} ($(ls "${target_dir}" | wc -l) jars) at ${target_dir} in $(( SECONDS - started_s ))s."
