# One image for the three workers, the release step and the generators.
# Built for docker-compose; on Heroku the buildpacks of app.json build the slug.
FROM maven:3.9.9-eclipse-temurin-17 AS jars
WORKDIR /build
COPY jvm jvm
RUN mvn -q -B -C -s jvm/settings.xml -f jvm/spark-connector/pom.xml \
        dependency:copy-dependencies -DoutputDirectory=/build/jars/spark-connector

FROM eclipse-temurin:17-jre-jammy
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN python3.11 -m venv /venv && /venv/bin/pip install --no-cache-dir -r requirements.txt
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1
COPY --from=jars /build/jars jars
COPY shared shared
COPY services services
CMD ["python", "-m", "shared.migrations"]
