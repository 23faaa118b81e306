# One image for the three workers, the release step, the topics and the generators.
# Built for docker-compose; on Heroku the buildpacks of app.json build the slug
# the same way: requirements.txt, then bin/post_compile. The Python of
# .python-version (3.13), and the Java of system.properties (17).
FROM eclipse-temurin:17-jre-jammy AS java
FROM python:3.13-slim-bookworm
COPY --from=java /opt/java/openjdk /opt/java/openjdk
ENV JAVA_HOME=/opt/java/openjdk
# curl: bin/fetch-connector-jars brings Spark's Kafka connector with it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN python -m venv /venv && /venv/bin/pip install --no-cache-dir -r requirements.txt
ENV PATH=/venv/bin:$JAVA_HOME/bin:$PATH PYTHONUNBUFFERED=1
COPY bin bin
COPY jvm jvm
COPY shared shared
COPY services services
# The generators of input (compose's `generators` profile) and the topics' creation: dev tools, never in the slug.
COPY devstack devstack
# After the code: the class-data archive is made by running the topologies.
RUN bin/post_compile
CMD ["python", "-m", "services.release"]
