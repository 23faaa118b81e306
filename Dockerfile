# One image for the three workers, the release step and the generators.
# Built for docker-compose; on Heroku the buildpacks of app.json build the slug
# the same way: requirements.txt, then bin/post_compile.
FROM eclipse-temurin:17-jre-jammy
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN python3.11 -m venv /venv && /venv/bin/pip install --no-cache-dir -r requirements.txt
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1
COPY bin bin
COPY jvm jvm
COPY shared shared
COPY services services
# After the code: the class-data archive is made by running the topologies.
RUN bin/post_compile
CMD ["python", "-m", "shared.migrations"]
